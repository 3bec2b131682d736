package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// A run's files under /data: asked of its caller (Request.Data) under its lease, with
// what the session's process holds already, and sent to the process as it needs them.

// data asks req's caller for the run's files, given what the process holds (nil:
// nothing), and checks them: names, nesting and total within l.
func (l Limits) data(ctx context.Context, req Request, held map[string]string) ([]File, error) {
	if req.Data == nil {
		return nil, nil
	}
	files, err := req.Data(ctx, held)
	if err != nil {
		return nil, err
	}
	var total int64
	names := make(map[string]bool, len(files))
	for _, f := range files {
		if err := sandchat.CheckDataPath(f.Name); err != nil {
			return nil, err
		}
		names[f.Name] = true
		total += max(f.Size, int64(len(f.Data)))
	}
	for _, f := range files {
		for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
			if names[dir] {
				return nil, sandchat.Errorf(sandchat.ECONFLICT, "/data/%s is a file, so /data/%s cannot be under it.", dir, f.Name)
			}
		}
	}
	if total > l.MaxDataBytes {
		return nil, sandchat.Errorf(sandchat.ETOOLARGE, "The files under /data total %s; a run may mount at most %s.", sandchat.Size(total), sandchat.Size(l.MaxDataBytes))
	}
	return files, nil
}

// dataHeld is a copy of what the process holds under /data, name → version, or nil.
func (s *Session) dataHeld() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		return nil
	}
	out := make(map[string]string, len(s.data))
	for n, v := range s.data {
		out[n] = v
	}
	return out
}

// dataFor is what a run must send of files for /data, given what the process held when
// they were asked for (the session is the run's since): the versions of all, the bytes
// of those the process does not hold.
func dataFor(files []File, held map[string]string, o *proc.Blobs) ([]proc.DataFile, map[string]string, error) {
	versions := make(map[string]string, len(files))
	out := make([]proc.DataFile, 0, len(files))
	for _, f := range files {
		v := f.Version
		if v == "" {
			sum := sha256.Sum256(f.Data)
			v = hex.EncodeToString(sum[:])
		}
		versions[f.Name] = v
		if held != nil && held[f.Name] == v {
			continue
		}
		if f.Data == nil {
			return nil, nil, fmt.Errorf("sandbox: /data/%s came without its bytes, and the session's process does not hold its version", f.Name)
		}
		out = append(out, proc.DataFile{Name: f.Name, Data: o.Add(f.Data)})
	}
	return out, versions, nil
}
