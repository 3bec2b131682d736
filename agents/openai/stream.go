package openai

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/sandchat/sandchat/agents"
)

var (
	// errStalled is the cause of an attempt cancelled by the idle timeout.
	errStalled = errors.New("openai: no data from the endpoint within the timeout")
	// errEmptyStream is a 200 that ended before any chunk: some proxies answer an
	// overloaded upstream that way.
	errEmptyStream = errors.New("openai: the endpoint closed the stream without sending anything")
)

// streamError is an error event received inside a 200 stream.
type streamError struct{ err *ssestream.StreamError }

func (e *streamError) Error() string { return "openai: " + e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// stream makes one attempt. relayed reports whether onDelta has been called, after
// which the attempt must not be retried.
func (p *Provider) stream(ctx context.Context, params oai.ChatCompletionNewParams, onDelta func(string)) (comp agents.Completion, relayed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(p.cfg.Timeout, func() { cancel(errStalled) })
	defer idle.Stop()

	s := p.chat.NewStreaming(ctx, params)
	defer s.Close()

	var (
		acc      accumulator
		chunks   int
		finished bool
	)
	for s.Next() {
		idle.Reset(p.cfg.Timeout)
		chunks++
		if u := s.Current().Usage; s.Current().JSON.Usage.Valid() {
			acc.usage = &agents.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
		}
		for _, choice := range s.Current().Choices {
			// One choice is asked for; extra ones from a lax server are ignored.
			if choice.Index != 0 {
				continue
			}
			if text := choice.Delta.Content + choice.Delta.Refusal; text != "" {
				acc.text.WriteString(text)
				relayed = true
				onDelta(text)
			}
			for _, tc := range choice.Delta.ToolCalls {
				acc.addToolCall(tc)
			}
			if choice.FinishReason != "" {
				finished = true
			}
		}
	}
	comp = acc.completion()

	if err := s.Err(); err != nil {
		if context.Cause(ctx) == errStalled {
			return comp, relayed, errStalled
		}
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			return comp, relayed, &streamError{se}
		}
		return comp, relayed, err
	}
	if chunks == 0 {
		return comp, relayed, errEmptyStream
	}
	if !finished {
		// Some compatible servers never send a finish reason; what arrived is kept.
		p.log.WarnContext(ctx, "openai: stream ended without a finish reason", "model", params.Model)
	}
	return comp, relayed, nil
}

// accumulator assembles a streamed answer. Tool calls arrive as fragments keyed by
// index: the first carries the id and the name, the next ones pieces of the arguments.
type accumulator struct {
	text  strings.Builder
	calls []*partialCall
	// byIndex maps a streamed index to its call in calls.
	byIndex map[int64]*partialCall
	usage   *agents.Usage // from the last chunk, when the endpoint reports it
}

type partialCall struct {
	id, name string
	args     strings.Builder
}

func (a *accumulator) addToolCall(tc oai.ChatCompletionChunkChoiceDeltaToolCall) {
	c := a.byIndex[tc.Index]
	// Some servers send every call whole under index 0; a new id then means a new call.
	if c == nil || (tc.ID != "" && c.id != "" && tc.ID != c.id) {
		c = &partialCall{}
		a.calls = append(a.calls, c)
		if a.byIndex == nil {
			a.byIndex = make(map[int64]*partialCall)
		}
		a.byIndex[tc.Index] = c
	}
	if c.id == "" {
		c.id = tc.ID
	}
	// Names are not fragmented by OpenAI, but some servers repeat them in every chunk.
	if c.name == "" {
		c.name = tc.Function.Name
	}
	c.args.WriteString(tc.Function.Arguments)
}

func (a *accumulator) completion() agents.Completion {
	comp := agents.Completion{Content: a.text.String(), Usage: a.usage}
	for i, c := range a.calls {
		id := c.id
		if id == "" {
			// The turn loop matches results to calls by id, so every call needs one.
			id = fmt.Sprintf("call_%d", i)
		}
		comp.ToolCalls = append(comp.ToolCalls, agents.ToolCall{
			ID:        id,
			Name:      c.name,
			Arguments: toolArguments(c.args.String()),
		})
	}
	return comp
}
