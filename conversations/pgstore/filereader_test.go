package pgstore

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// TestOpenFile: a file read block by block reads as its bytes, from any offset and from
// several goroutines; as it was when opened though replaced meanwhile; only by the
// conversation's members.
func TestOpenFile(t *testing.T) {
	b := setupFiles(t)
	data := make([]byte, 3*fileBlockBytes+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	ref, _, err := b.store.UploadFile(b.alice, b.conv, "blocks.bin", "", data, conversations.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	f, r, err := b.store.OpenFile(b.viewer, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f.Size != int64(len(data)) || f.Name != "blocks.bin" || f.ConversationID != b.conv {
		t.Fatalf("file %+v", f)
	}
	// Replaced after opening: the reader still reads what was opened.
	if _, replaced, err := b.store.UploadFile(b.alice, b.conv, "blocks.bin", "", []byte("new"), conversations.Quota{}); err != nil || !replaced {
		t.Fatalf("replace: %v %v", replaced, err)
	}
	whole, err := io.ReadAll(io.NewSectionReader(r, 0, f.Size))
	if err != nil || !bytes.Equal(whole, data) {
		t.Fatalf("sequential read: %v, %d bytes, equal %v", err, len(whole), bytes.Equal(whole, data))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				off := rng.Int64N(int64(len(data)))
				p := make([]byte, rng.IntN(3*fileBlockBytes))
				n, err := r.ReadAt(p, off)
				want := min(len(p), len(data)-int(off))
				if n != want || (n < len(p)) != (err == io.EOF) || !bytes.Equal(p[:n], data[off:int(off)+n]) {
					t.Errorf("ReadAt(%d bytes, %d): %d, %v", len(p), off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("read after close")
	}

	stranger := sandchat.WithUser(context.Background(), &sandchat.User{ID: 1 << 40, Name: "stranger"})
	if _, _, err := b.store.OpenFile(stranger, ref.ID); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
		t.Fatalf("a stranger: %v", err)
	}
	if _, _, err := b.store.OpenFile(b.alice, ref.ID+1000); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
		t.Fatalf("no such file: %v", err)
	}
	_, r2, err := b.store.OpenFile(b.alice, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if got, _ := io.ReadAll(io.NewSectionReader(r2, 0, 3)); string(got) != "new" {
		t.Fatalf("reopened: %q", got)
	}
}
