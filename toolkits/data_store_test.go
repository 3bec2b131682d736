package toolkits_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/conversations/pgstore"
	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/toolkits"
	"github.com/sandchat/sandchat/toolkits/tables"
	"github.com/sandchat/sandchat/toolkits/tables/tablestest"
)

// TestTablesFromStore: the data analysis tool reads a conversation's files from the
// store as it describes them, block by block: a CSV over several blocks and a workbook
// read whole, a window at the CSV's end, and nothing for a stranger.
func TestTablesFromStore(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	store := pgstore.New(db, time.Hour)
	user := func(name string) context.Context {
		var id int64
		if err := db.QueryRow(ctx, `insert into users (name) values ($1) returning id`, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return sandchat.WithUser(ctx, &sandchat.User{ID: id, Name: name})
	}
	alice, stranger := user("alice"), user("stranger")
	conv, err := store.CreateConversation(alice, nil, "tables")
	if err != nil {
		t.Fatal(err)
	}
	csv := tablestest.CSV(5 << 20)
	lines := int64(bytes.Count(csv, []byte("\n")))
	csvRef, _, err := store.UploadFile(alice, conv.ID, "orders.csv", "text/csv", csv, conversations.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	book, err := tablestest.Workbook(20_000)
	if err != nil {
		t.Fatal(err)
	}
	bookRef, _, err := store.UploadFile(alice, conv.ID, "orders.xlsx", "", book, conversations.Quota{})
	if err != nil {
		t.Fatal(err)
	}
	d := &toolkits.Tables{Files: store}

	tb, err := d.Preview(alice, conv.ID, csvRef.ID, "", lines-3, 10)
	if err != nil {
		t.Fatal(err)
	}
	sh := tb.Sheets[0]
	if tb.Size != int64(len(csv)) || sh.Rows != lines-1 || len(sh.Data) != 2 || sh.Columns[2].Type != tables.TypeDate || sh.Columns[0].Max != lines-2 {
		t.Fatalf("CSV: size %d rows %d data %q columns %+v", tb.Size, sh.Rows, sh.Data, sh.Columns[:3])
	}
	tb, err = d.Preview(alice, conv.ID, bookRef.ID, "", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	sh = tb.Sheets[0]
	if sh.Rows != 20_000 || sh.Columns[2].Type != tables.TypeDate || sh.Columns[2].Min != "2024-01-01" || len(sh.Data) != 3 {
		t.Fatalf("workbook: rows %d columns %+v", sh.Rows, sh.Columns)
	}
	if _, err := d.Preview(stranger, conv.ID, csvRef.ID, "", 0, 3); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
		t.Fatalf("a stranger: %v", err)
	}
	if _, err := d.Preview(alice, conv.ID+1, csvRef.ID, "", 0, 3); sandchat.ErrorCode(err) != sandchat.ENOTFOUND {
		t.Fatalf("another conversation's file: %v", err)
	}
}
