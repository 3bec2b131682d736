package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/proc"
	"github.com/sandchat/sandchat/sandbox/internal/session"
)

// The base snapshot: one per runtime build, booted by the first node and shared through
// the store (its wire form to a process is in basepack.go).

// ensureBase finds the build's shared base in Redis or boots one and publishes it. Any
// node can then restore any session: snapshots of separate boots differ.
func (n *nodeProcs) ensureBase(ctx context.Context, build string) error {
	hash, err := n.st.BaseFor(ctx, build)
	if err != nil {
		return err
	}
	var snap []byte
	if hash != "" {
		if snap, err = n.st.LoadBase(ctx, hash); err != nil {
			return err
		}
	}
	if snap == nil {
		if snap, err = n.boot(ctx); err != nil {
			return err
		}
		sum := sha256.Sum256(snap)
		mine := hex.EncodeToString(sum[:])
		if hash, err = n.st.PublishBase(ctx, build, mine, snap); err != nil {
			return err
		}
		if hash != mine {
			if snap, err = n.st.LoadBase(ctx, hash); err != nil || snap == nil {
				return fmt.Errorf("load base %s published by another node: %v", hash, err)
			}
		}
	}
	n.setBase(snap, hash)
	return nil
}

// boot starts Pyodide fresh in a session process and takes the heap every session is
// diffed against.
func (n *nodeProcs) boot(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := n.spawn(ctx, ctx, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	defer p.Close("boot done")
	if len(n.cfg.Preload) > 0 && n.launch.Fetch != nil && p.View() != nil {
		pk := n.launch.Fetch.Begin(p.View())
		defer pk.Done()
		notes := pk.Ensure(ctx, session.PreloadCode(n.cfg.Preload), nil)
		if u := pk.UnservedNames(); len(u) > 0 {
			notes = append(notes, "packages not served: "+strings.Join(u, ", ")+" (the log says why)")
		}
		if len(notes) > 0 {
			return nil, fmt.Errorf("preload: %s", strings.Join(notes, "; "))
		}
	}
	f, err := p.Call(ctx, proc.BootReq{Op: "boot", Preload: append([]string{}, n.cfg.Preload...)}, nil)
	if err != nil {
		return nil, fmt.Errorf("boot pyodide: %w%s", err, p.ConsoleTail())
	}
	var r proc.BootReply
	if err := json.Unmarshal(f.JSON, &r); err != nil {
		return nil, err
	}
	snap := f.Bytes(r.Snapshot)
	if len(snap) < 64 {
		return nil, errors.New("boot returned no snapshot")
	}
	return snap, nil
}
