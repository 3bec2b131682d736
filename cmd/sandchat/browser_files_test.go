package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// onControl calls fn, a JS function of `this`, on the one control of role and name within
// selector, awaits what it returns and decodes it into out.
func onControl(role, name, selector, fn string, out any) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var found []cdp.BackendNodeID
		if err := controls(role, name, selector, &found).Do(ctx); err != nil {
			return err
		}
		if len(found) != 1 {
			return fmt.Errorf("%d %ss named %q in %q, want one", len(found), role, name, selector)
		}
		obj, err := dom.ResolveNode().WithBackendNodeID(found[0]).Do(ctx)
		if err != nil {
			return err
		}
		res, exc, err := runtime.CallFunctionOn(fn).WithObjectID(obj.ObjectID).WithAwaitPromise(true).WithReturnByValue(true).Do(ctx)
		if err != nil {
			return err
		}
		if exc != nil {
			return fmt.Errorf("%s: %s", fn, exc.Text)
		}
		return json.Unmarshal(res.Value, out)
	})
}

// description reads the accessible description of the one element of role and name.
func description(role, name string, out *string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		doc, _, err := runtime.Evaluate("document").Do(ctx)
		if err != nil {
			return err
		}
		nodes, err := accessibility.QueryAXTree().WithObjectID(doc.ObjectID).WithRole(role).WithAccessibleName(name).Do(ctx)
		if err != nil {
			return err
		}
		var shown []*accessibility.Node
		for _, n := range nodes {
			if !n.Ignored {
				shown = append(shown, n)
			}
		}
		if len(shown) != 1 {
			return fmt.Errorf("%d %ss named %q, want one", len(shown), role, name)
		}
		*out = ""
		if d := shown[0].Description; d != nil {
			return json.Unmarshal(d.Value, out)
		}
		return nil
	})
}

// count sets n to the number of controls of role and name within selector.
func count(role, name, selector string, n *int) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var found []cdp.BackendNodeID
		err := controls(role, name, selector, &found).Do(ctx)
		*n = len(found)
		return err
	})
}

// TestBrowserConversationFiles: the uploads above the message box are labelled as the
// conversation's files and the Files panel says where Python finds them and what it
// keeps; removing one can be undone until its toast goes, and only then (or when the
// page is left) is it deleted on the server.
func TestBrowserConversationFiles(t *testing.T) {
	tb, alice, conv, _ := browserConversation(t)
	for _, name := range []string{"notes.txt", "other.txt"} {
		if code := alice.upload(conv, name, "remember the milk\n"); code != 201 {
			t.Fatalf("upload %s: %d", name, code)
		}
	}
	chip := func(name string) string {
		return fmt.Sprintf(`[...document.querySelectorAll("#attachments .chip")].some((c) => c.textContent.includes(%s))`, jsString(name))
	}
	stored := func(name string) bool { _, ok := alice.files(conv)[name]; return ok }
	gone := func(t *testing.T, name string) {
		t.Helper()
		eventually(t, 10*time.Second, name+" gone from the server", func() bool { return !stored(name) })
	}

	t.Run("the chips and the panel say whose files they are", func(t *testing.T) {
		var lists int
		var labelShown bool
		var said string
		tb.run(t, "the chips",
			chromedp.Reload(),
			until(chip("notes.txt")),
			count("list", "Conversation files", "#composer", &lists),
			chromedp.Evaluate(`(() => { const l = [...document.querySelectorAll("#composer *")].find((e) => e.children.length === 0 && e.textContent === "Conversation files"); return !!l && l.getClientRects().length > 0 })()`, &labelShown),
		)
		tb.shot(t, "01-conversation-files")
		tb.run(t, "the panel",
			press("button", "Files (2)", ""),
			chromedp.WaitVisible("#files-panel", chromedp.ByID),
			description("region", "Files", &said),
		)
		tb.shot(t, "02-files-panel")
		tb.run(t, "close it", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotVisible("#files-panel", chromedp.ByID))
		if lists != 1 || !labelShown {
			t.Errorf("%d lists named Conversation files in the message box, label shown %v", lists, labelShown)
		}
		if want := "Python sees these under /data (read-only). Files your code writes in its working directory are kept; files elsewhere (like /tmp) are not."; said != want {
			t.Errorf("the Files panel says %q, want %q", said, want)
		}
	})

	t.Run("removing a file can be undone", func(t *testing.T) {
		tb.run(t, "remove it, then undo",
			press("button", "Remove notes.txt", "#attachments"),
			until(`!`+chip("notes.txt")),
			until(hasToast("Deleted notes.txt")),
		)
		tb.shot(t, "03-undo-toast")
		tb.run(t, "undo",
			press("button", "Undo deleting notes.txt", "#toasts"),
			until(chip("notes.txt")),
			until(`!`+hasToast("Deleted notes.txt")),
		)
		// Past the time the toast would have shown, nothing was sent.
		time.Sleep(7 * time.Second)
		if !stored("notes.txt") {
			t.Fatal("notes.txt was deleted after Undo")
		}
		tb.run(t, "remove it for good",
			press("button", "Remove notes.txt", "#attachments"),
			until(hasToast("Deleted notes.txt")),
		)
		if !stored("notes.txt") {
			t.Error("notes.txt was deleted while its Undo showed")
		}
		tb.run(t, "the toast goes", until(`!`+hasToast("Deleted notes.txt")), until(`!`+chip("notes.txt")))
		gone(t, "notes.txt")
	})

	t.Run("a removal is sent when the page is left", func(t *testing.T) {
		tb.run(t, "at 390 px",
			chromedp.EmulateViewport(390, 844),
			chromedp.Reload(),
			until(chip("other.txt")),
			until(`document.querySelector("#sidebar").getBoundingClientRect().right <= 0`),
		)
		tb.run(t, "remove, then leave",
			press("button", "Remove other.txt", "#attachments"),
			until(hasToast("Deleted other.txt")),
		)
		tb.shot(t, "04-undo-toast-phone")
		tb.run(t, "leave", chromedp.Reload(), until(`document.querySelector("#conv-title").textContent === "test"`))
		gone(t, "other.txt")
		tb.run(t, "it stays gone", chromedp.EmulateViewport(1366, 850), until(`document.querySelector("#attachments").childElementCount === 0`))
	})
}

// TestBrowserDisplayedImageActions: a displayed image offers Open, which shows it full
// size in the viewer, and Download, a link that saves the image's own bytes.
func TestBrowserDisplayedImageActions(t *testing.T) {
	tb, alice, conv, _ := browserConversation(t)
	if r := alice.run(conv, sandboxtest.RichDisplay); r.Status != "success" {
		t.Fatalf("setup: %+v", r)
	}
	cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.textContent.includes("display(Picture())"))`
	var name string
	var id string
	tb.run(t, "show an image",
		say(py(`display(Picture())`)),
		until(cell+`?.dataset.done && `+cell+`.querySelector("img.display-image")?.naturalWidth === 12`),
		until(cell+`.querySelector(".display-actions a[href]")`),
		chromedp.Evaluate(cell+`.querySelector("img.display-image").alt`, &name),
		chromedp.Evaluate(cell+`.querySelector("img.display-image").dataset.file`, &id),
	)
	var link struct{ Href, Download string }
	downloads := t.TempDir()
	tb.run(t, "Download is a link that saves its bytes",
		onControl("link", "Download "+name, ".display", `function () { return { href: this.href, download: this.getAttribute("download") } }`, &link),
		cdpbrowser.SetDownloadBehavior(cdpbrowser.SetDownloadBehaviorBehaviorAllow).WithDownloadPath(downloads),
		press("link", "Download "+name, ".display"),
	)
	if link.Download != name || !strings.HasPrefix(link.Href, "blob:") {
		t.Errorf("the Download link: %+v, want download=%q and a blob: href", link, name)
	}
	resp, want := alice.rawDo("GET", "/api/v1/files/"+id, nil)
	if resp.StatusCode != 200 || len(want) == 0 {
		t.Fatalf("GET file %s: %d", id, resp.StatusCode)
	}
	var got []byte
	var err error
	if _, ok := poll(20*time.Second, func() bool {
		got, err = os.ReadFile(filepath.Join(downloads, name))
		return err == nil && bytes.Equal(got, want)
	}); !ok {
		t.Fatalf("no download of %s with the file's %d bytes: %d bytes, %v", name, len(want), len(got), err)
	}
	var dialogs int
	tb.run(t, "Open shows it full size",
		press("button", "Open "+name, ".display"),
		until(`document.querySelector("#viewer").open && document.querySelector("#viewer-img").naturalWidth === 12`),
		count("dialog", "Image", "", &dialogs),
	)
	tb.shot(t, "01-viewer")
	tb.run(t, "close it", chromedp.KeyEvent(kb.Escape), until(`!document.querySelector("#viewer").open`))
	if dialogs != 1 {
		t.Errorf("%d dialogs named Image", dialogs)
	}
}
