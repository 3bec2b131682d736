package toolkits

import (
	"testing"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// TestLinkDisplayImages: a displayed image finds the file stored under its name, and an
// image that is only a display item is not listed among the run's files.
func TestLinkDisplayImages(t *testing.T) {
	shown := "chart.png" // given by display(..., metadata={"filename": ...})
	saved := "table.csv"
	res := sandbox.Result{RunOutcome: sandchat.RunOutcome{
		Artifacts: []sandchat.Artifact{{Name: saved}},
		Displays:  []sandchat.Display{{Kind: "display", Image: &sandchat.DisplayImage{Name: shown}}},
	}}
	stored := []conversations.FileRef{{ID: 1, Name: saved}, {ID: 2, Name: shown}}
	files := linkDisplayImages(res, stored)
	if id := res.Displays[0].Image.FileID; id != 2 {
		t.Errorf("the image of %q got file id %d, want 2", shown, id)
	}
	if len(files) != 1 || files[0].ID != 1 {
		t.Errorf("run's files %+v, want only %s: the display image is not a file the run made", files, saved)
	}
}
