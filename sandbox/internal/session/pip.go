package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandchat/sandchat/sandbox/internal/pkgs"
	"github.com/sandchat/sandchat/sandbox/internal/proc"
)

// The engine's side of a session's package requests: micropip.install in a session
// sends a "pip" frame during a run, answered here with what the fetcher (internal/pkgs)
// resolved, verified and cached; the session installs from its read-only view of the
// cache and never gets the network.

const pipRequestTimeout = 2 * time.Minute

// pipServer answers the install requests of one run of a session; what they fetch is
// part of the run's load.
type pipServer struct {
	env  *Env
	lv   *Session
	ctx  context.Context
	busy chan struct{}
	run  *pkgs.Load
}

func (env *Env) pipServer(ctx context.Context, lv *Session, run *pkgs.Load) *pipServer {
	return &pipServer{env: env, lv: lv, ctx: ctx, busy: make(chan struct{}, 1), run: run}
}

func (s *pipServer) handle(seq int64, raw json.RawMessage) proc.PipDone {
	out := proc.PipDone{Op: "pipDone", Seq: seq, Wheels: []proc.PipWheel{}, Lock: []string{}}
	select {
	case s.busy <- struct{}{}:
		defer func() { <-s.busy }()
	default:
		out.Error = "another micropip.install is in progress in this session"
		return out
	}
	var req pkgs.Request
	if err := json.Unmarshal(raw, &req); err != nil {
		out.Error = "unreadable install request"
		return out
	}
	if s.env.Packages == nil && req.Lock && len(req.Requirements) == 1 && pkgs.ValidName(req.Requirements[0]) {
		// No fetcher: the session's Pyodide loads its distribution's packages from the
		// package directory itself.
		out.Lock = req.Requirements
		return out
	}
	if s.env.Packages == nil || s.run == nil {
		out.Error = "installing packages is turned off in this sandbox; the packages of its Pyodide distribution can still be imported"
		if !s.env.Limits.PipOff {
			out.Error = "installing packages is unavailable: the server's package cache could not be set up"
		}
		return out
	}
	have := s.lv.installed()
	ctx, cancel := context.WithTimeout(s.ctx, pipRequestTimeout)
	defer cancel()
	var lockNotes []string
	plan, err := s.env.Packages.Install(ctx, s.run, req, have)
	if err == nil && len(plan.Lock) > 0 {
		// Given to the run until it ends: the Worker loads them after this answer.
		lockNotes = s.run.Ensure(ctx, "", plan.Lock)
		var unserved []string
		for _, n := range plan.Lock {
			if s.run.Unserved(n) {
				unserved = append(unserved, n)
			}
		}
		switch {
		case len(unserved) > 0 && req.Lock:
			// An import: Python names the module.
			out.Error = pkgs.UnservedLine
			return out
		case len(unserved) > 0:
			out.Error = strings.Join(unserved, ", ") + ": " + pkgs.UnservedLine
			return out
		}
	}
	if err == nil && len(lockNotes) > 0 {
		err = &pkgs.Error{Msg: strings.Join(lockNotes, "; ")}
	}
	if err != nil {
		out.Error = s.env.pipError(ctx, "micropip install", err)
		return out
	}
	s.lv.install(plan.Wheels)
	for _, w := range plan.Wheels {
		out.Wheels = append(out.Wheels, proc.PipWheel{Name: w.Name, Version: w.Version, Path: s.run.Path(w.Rel())})
	}
	out.Lock = plan.Lock
	return out
}

// pipError is what a session is told of a package request that failed: a refusal as
// it is, anything else logged and said in general words.
func (env *Env) pipError(ctx context.Context, what string, err error) string {
	var pe *pkgs.Error
	if errors.As(err, &pe) {
		return pe.Msg
	}
	env.Log.ErrorContext(ctx, what, "err", err)
	return "the install failed inside the sandbox engine"
}

// restorePip gives the wheels a saved session had installed (its record, raw) to the load
// r: fetched again when evicted and checked against their recorded sha256. It returns
// them as the process installs them, the record decoded, and what could not be restored.
func (env *Env) restorePip(ctx context.Context, r *pkgs.Load, key string, raw json.RawMessage) ([]proc.PipWheel, []pkgs.Wheel, []string) {
	out := []proc.PipWheel{}
	var wheels []pkgs.Wheel
	if len(raw) == 0 {
		return out, nil, nil
	}
	if err := json.Unmarshal(raw, &wheels); err != nil {
		// What did decode is restored and kept.
		env.Log.Warn("session's micropip record does not decode", "session", key, "err", err)
	}
	if len(wheels) == 0 {
		return out, wheels, nil
	}
	if env.Packages == nil {
		return out, wheels, []string{"[sandbox] packages installed with micropip are not restored: installing is turned off"}
	}
	var notes []string
	for _, w := range wheels {
		if err := env.Packages.FetchWheel(ctx, r, w, pkgs.MaxWheelBytes); err != nil {
			notes = append(notes, fmt.Sprintf("[sandbox] installed package %s could not be restored: %v", w.Name, err))
			continue
		}
		out = append(out, proc.PipWheel{Name: w.Name, Version: w.Version, Path: r.Path(w.Rel())})
	}
	return out, wheels, notes
}
