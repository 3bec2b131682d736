package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// A file's bytes are read in blocks of fileBlockBytes (substring of the column, which
// Postgres answers from the TOAST chunks that hold the block alone: the column is
// stored uncompressed, see migrations/011), keeping at most fileBlocksKept of them; the
// block after the last one read is fetched while it is being read.
const (
	fileBlockBytes = 2 << 20
	fileBlocksKept = 3
)

// OpenFile returns a file and a reader of its bytes if the caller may view its
// conversation, like File, but without reading them: the reader fetches them as they
// are read, in bounded memory whatever the file's size, all within one read-only
// snapshot (a file replaced meanwhile reads as it was opened). It holds a database
// connection until closed.
func (s *Store) OpenFile(ctx context.Context, id int64) (conversations.StoredFile, conversations.FileReader, error) {
	var f conversations.StoredFile
	tx, err := s.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return f, nil, err
	}
	var size int64
	err = tx.QueryRow(ctx, `select id, name, content_type, octet_length(data), conversation_id, source, execution_id
		from files where id = $1`, id).Scan(&f.ID, &f.Name, &f.ContentType, &size, &f.ConversationID, &f.Source, &f.ExecutionID)
	if err == nil {
		_, err = share.Authorize(ctx, tx, f.ConversationID, sandchat.Anyone...)
		if c := sandchat.ErrorCode(err); c == sandchat.ENOTFOUND || c == sandchat.EFORBIDDEN {
			err = sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
		}
	}
	if err != nil {
		tx.Rollback(ctx)
		return f, nil, pgdb.PgError(err, "File")
	}
	f.Size = size
	return f, &fileReader{ctx: ctx, tx: tx, id: id, size: size}, nil
}

// fileReader is a stored file's bytes, fetched a block at a time within its
// transaction. ReadAt may be called from several goroutines.
type fileReader struct {
	ctx  context.Context
	tx   pgx.Tx
	id   int64
	size int64

	// mu guards what follows, and the transaction but during a fetch ahead, which owns
	// it until waited for.
	mu     sync.Mutex
	blocks []*fileBlock
	clock  int64 // reads so far: when each block was last read
	ahead  chan *fileBlock
	closed bool
	err    error // a fetch that failed: the reader is done
}

type fileBlock struct {
	n    int64  // bytes n*fileBlockBytes onwards
	data []byte // reused from block to block
	held bool   // data holds block n
	used int64
	err  error
}

func (r *fileReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	done := 0
	for done < len(p) {
		at := off + int64(done)
		if at >= r.size {
			return done, io.EOF
		}
		b, err := r.blockLocked(at / fileBlockBytes)
		if err != nil {
			return done, err
		}
		done += copy(p[done:], b.data[at%fileBlockBytes:])
	}
	return done, nil
}

// blockLocked returns block n, fetching it unless held, and starts fetching the next.
func (r *fileReader) blockLocked(n int64) (*fileBlock, error) {
	if r.closed {
		return nil, errors.New("file reader closed")
	}
	if r.err != nil {
		return nil, r.err
	}
	r.clock++
	b := r.heldLocked(n)
	if b == nil {
		r.waitLocked()
		if b = r.heldLocked(n); b == nil {
			b = r.spareLocked(n)
			if r.err = r.fetch(b); r.err != nil {
				return nil, r.err
			}
			b.held = true
		}
	}
	b.used = r.clock
	if next := n + 1; next*fileBlockBytes < r.size && r.ahead == nil && r.heldLocked(next) == nil {
		nb := r.spareLocked(next)
		ch := make(chan *fileBlock, 1)
		r.ahead = ch
		go func() {
			nb.err = r.fetch(nb)
			ch <- nb
		}()
	}
	return b, nil
}

func (r *fileReader) heldLocked(n int64) *fileBlock {
	for _, b := range r.blocks {
		if b.held && b.n == n {
			return b
		}
	}
	return nil
}

// spareLocked is a block to fetch block n into: a new one while fewer than
// fileBlocksKept exist, else the least recently read. No fetch runs when it is called.
func (r *fileReader) spareLocked(n int64) *fileBlock {
	var b *fileBlock
	if len(r.blocks) < fileBlocksKept {
		b = &fileBlock{}
		r.blocks = append(r.blocks, b)
	} else {
		for _, c := range r.blocks {
			switch {
			case b == nil:
				b = c
			case !b.held: // an empty one is the best
			case !c.held || c.used < b.used:
				b = c
			}
		}
	}
	b.n, b.held, b.used = n, false, r.clock
	return b
}

// waitLocked takes the block the fetch ahead read, if one runs.
func (r *fileReader) waitLocked() {
	if r.ahead == nil {
		return
	}
	b := <-r.ahead
	r.ahead = nil
	b.held = b.err == nil
}

// fetch reads block b.n from the database into b.data; the caller marks it held.
func (r *fileReader) fetch(b *fileBlock) error {
	rows, err := r.tx.Query(r.ctx, `select substring(data from $2 for $3) from files where id = $1`,
		pgx.QueryResultFormats{pgx.BinaryFormatCode}, r.id, b.n*fileBlockBytes+1, fileBlockBytes)
	if err != nil {
		return pgdb.PgError(err, "File")
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return pgdb.PgError(err, "File")
		}
		return sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
	}
	raw := rows.RawValues()[0]
	if want := min(fileBlockBytes, r.size-b.n*fileBlockBytes); int64(len(raw)) != want {
		return fmt.Errorf("file %d: block %d holds %d bytes, not %d", r.id, b.n, len(raw), want)
	}
	b.data = append(b.data[:0], raw...)
	rows.Close()
	return pgdb.PgError(rows.Err(), "File")
}

func (r *fileReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.waitLocked()
	r.blocks = nil
	return r.tx.Rollback(context.WithoutCancel(r.ctx))
}
