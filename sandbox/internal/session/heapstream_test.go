package session

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// BenchmarkHeapDelta compares a checkpoint's heap path as the server runs it (XOR-ed and
// compressed as it streams in; decompressed and XOR-ed as it streams out) with the same
// work on the delta held whole, for a delta of 8 MiB: half the blocks differ from the
// base by a few words (as a run's writes do), half are past the base heap.
func BenchmarkHeapDelta(b *testing.B) {
	const size, ho = 256, 48
	base := make([]byte, ho+16<<20)
	binary.LittleEndian.PutUint32(base[4:], ho)
	r := rand.New(rand.NewPCG(3, 4))
	for i := ho; i < len(base); i += 8 {
		if r.IntN(3) == 0 {
			binary.LittleEndian.PutUint64(base[i:], r.Uint64()&0x00ff00ff00ff00ff)
		}
	}
	count := (8 << 20) / size
	delta := make([]byte, 12+count*(4+size))
	binary.LittleEndian.PutUint32(delta[4:], uint32(count))
	binary.LittleEndian.PutUint32(delta[8:], size)
	blocks := delta[12+4*count:]
	for k := range count {
		i := uint32(2 * k)
		if k >= count/2 {
			i = uint32((16<<20)/size + k)
		}
		binary.LittleEndian.PutUint32(delta[12+4*k:], i)
		blk := blocks[k*size : (k+1)*size]
		if int(i)*size < len(base)-ho {
			copy(blk, base[ho+int(i)*size:])
		}
		binary.LittleEndian.PutUint32(blk[r.IntN(size/4)*4:], r.Uint32())
	}
	b.Run("held whole", func(b *testing.B) {
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
		for b.Loop() {
			z := enc.EncodeAll(xorBase(base, delta), nil)
			raw, err := dec.DecodeAll(z, nil)
			if err != nil {
				b.Fatal(err)
			}
			_ = xorBase(base, raw)
		}
	})
	b.Run("streamed", func(b *testing.B) {
		for b.Loop() {
			z, err := compressDelta(base, bytes.NewReader(delta), int64(len(delta)), 1<<30)
			if err != nil {
				b.Fatal(err)
			}
			var o proc.Blobs
			if _, err := deltaBlob(&o, base, z); err != nil {
				b.Fatal(err)
			}
			if err := proc.WriteFrame(io.Discard, struct{}{}, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
