package session

import (
	"fmt"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// shaper makes what a run returns and streams out of what its process sends: output cut
// at its limit with a marker, artifacts and display items within theirs. The engine's
// limits are Env.Limits'; this is where they shape results.
type shaper struct {
	MaxOutput        int
	MaxArtifacts     int
	MaxArtifactBytes int64
	MaxDisplays      int
	MaxDisplayBytes  int64
}

func (env *Env) shaper() shaper {
	l := &env.Limits
	return shaper{MaxOutput: l.MaxOutput, MaxArtifacts: l.MaxArtifacts, MaxArtifactBytes: l.MaxArtifactBytes,
		MaxDisplays: l.MaxDisplays, MaxDisplayBytes: l.MaxDisplayBytes}
}

// hooks sends a run's output and display items to req's callbacks and to what the
// engine keeps, and its package requests to pip.
func (c shaper) hooks(req Request, pip *pipServer) (sinks, proc.RunHooks) {
	s := sinks{
		disp: &displays{max: c.MaxDisplays, maxBytes: c.MaxDisplayBytes, maxImage: max(c.MaxArtifactBytes, 1), on: req.OnDisplay},
		seen: &seenOutput{max: c.MaxOutput},
	}
	return s, proc.RunHooks{
		Output: func(stream, chunk string, cut bool) {
			s.disp.wrote(stream, len(chunk))
			s.seen.add(stream, chunk, cut)
			if req.OnOutput != nil {
				req.OnOutput(stream, chunk)
			}
		},
		Display: s.disp.add,
		Pip:     pip.handle,
	}
}

// lostRun is the answer to a run whose process gave none: why, and what it printed as
// it came (seen), cut at the output limit with its marker.
func lostRun(status, typ, msg string, ms int64, session SessionInfo, seen *seenOutput) Result {
	res := Result{RunOutcome: sandchat.RunOutcome{Status: status, ExecutionMS: ms,
		Error: &sandchat.RunError{Type: typ, Message: msg}}, Session: session}
	res.Stdout, res.Stderr = seen.text()
	res.Order = seen.order(0)
	return res
}

// notesPrefix is what the engine says ahead of a run's stderr (how its session came
// back, packages it could not fetch).
func notesPrefix(notes []string) string {
	if len(notes) == 0 {
		return ""
	}
	return strings.Join(notes, "\n") + "\n"
}

// result turns a run reply into a Result: output with truncation markers, artifacts
// within their limits, and which changed files its session could not keep (notKept,
// by path: live.ran).
func (c shaper) result(r *proc.RunReply, f proc.Frame, notKept map[string]bool, notes []string) Result {
	res := Result{RunOutcome: sandchat.RunOutcome{Status: r.Status, Stdout: r.Stdout, Stderr: r.Stderr, Result: r.Result, Error: r.Error, Artifacts: []sandchat.Artifact{}}}
	if r.StdoutTruncated {
		res.Stdout += truncatedAt(c.MaxOutput)
	}
	if r.StderrTruncated {
		res.Stderr += truncatedAt(c.MaxOutput)
	}
	res.Stderr = notesPrefix(notes) + res.Stderr
	if len(r.Outside) > 0 {
		res.Stderr += "[sandbox] not kept: " + strings.Join(plainNames(r.Outside), ", ") + " (only files in the working directory /home/pyodide are kept and come back; write there)\n"
	}
	var skipped, unsaved []string
	named := map[string]bool{}
	for _, ch := range r.Changed {
		b := f.Bytes(ch.Data)
		// Named as it is stored, shown and downloaded: the plain form of its path, with
		// a number when another file of the run has that form. The session keeps the
		// path as Python wrote it.
		name := sandchat.UniqueArtifactName(ch.Path, func(n string) bool { return named[n] })
		named[name] = true
		switch {
		case ch.Data == nil || ch.Size > c.MaxArtifactBytes:
			skipped = append(skipped, fmt.Sprintf("%s is %s; files from a run are limited to %s each", name, sandchat.Size(ch.Size), sandchat.Size(c.MaxArtifactBytes)))
		case len(res.Artifacts) >= c.MaxArtifacts:
			skipped = append(skipped, fmt.Sprintf("%s: a run returns at most %d files", name, c.MaxArtifacts))
		default:
			res.Artifacts = append(res.Artifacts, sandchat.Artifact{Name: name, ContentType: contentType(ch.Path, b), Data: b, Size: int64(len(b))})
		}
		if notKept[ch.Path] {
			unsaved = append(unsaved, name)
		}
	}
	if r.Omitted > 0 {
		skipped = append(skipped, fmt.Sprintf("%d more changed files", r.Omitted))
	}
	sort.Slice(res.Artifacts, func(i, j int) bool { return res.Artifacts[i].Name < res.Artifacts[j].Name })
	if len(skipped) > 0 {
		sort.Strings(skipped)
		res.Stderr += "[sandbox] files not returned: " + strings.Join(skipped, "; ") + "\n"
	}
	if len(unsaved) > 0 {
		sort.Strings(unsaved)
		res.Stderr += fmt.Sprintf("[sandbox] not kept with the session state (over %d MiB, or too many files): %s\n",
			c.MaxArtifactBytes>>20, strings.Join(unsaved, ", "))
	}
	if r.Unkept > 0 {
		res.Stderr += fmt.Sprintf("[sandbox] not kept with the session state: %d files, folders or links whose paths are over 4096 bytes, not valid text, or past %d in one run\n",
			r.Unkept, MaxChangedFiles)
	}
	return res
}

func contentType(name string, b []byte) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		sniff := http.DetectContentType(b)
		// Trust the bytes over the name when they clearly say image or archive.
		if strings.HasPrefix(sniff, "image/") || sniff == "application/pdf" || sniff == "application/zip" {
			return sniff
		}
		return t
	}
	return http.DetectContentType(b)
}

// plainNames are paths as the engine shows them (ArtifactName): no hidden characters.
func plainNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = sandchat.ArtifactName(p)
	}
	return out
}

// truncatedAt ends an output cut at limit bytes.
func truncatedAt(limit int) string {
	return fmt.Sprintf("\n[... output truncated at %d bytes ...]\n", limit)
}
