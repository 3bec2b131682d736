package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xuri/excelize/v2"

	"github.com/sandchat/sandchat/agents/openai/openaitest"
)

const salesCSV = "id;price;day;city\n1;2,5;2024-01-15;Paris\n2;3;2024-03-01;Lyon\n3;;2023-12-31;Paris\n"

// salesXLSX is a workbook with a date column in Excel's date format and a second sheet.
func salesXLSX(t *testing.T) string {
	t.Helper()
	f := excelize.NewFile()
	defer f.Close()
	f.SetSheetName("Sheet1", "Orders")
	f.SetSheetRow("Orders", "A1", &[]any{"day", "amount"})
	f.SetSheetRow("Orders", "A2", &[]any{time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC), 10.5})
	f.SetSheetRow("Orders", "A3", &[]any{time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), 20})
	style, _ := f.NewStyle(&excelize.Style{NumFmt: 14})
	f.SetCellStyle("Orders", "A2", "A3", style)
	f.NewSheet("Notes")
	f.SetSheetRow("Notes", "A1", &[]any{"note"})
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

type previewJSON struct {
	Format     string
	Delimiter  string
	SheetNames []string `json:"sheet_names"`
	Sheets     []struct {
		Name    string
		Rows    int64
		Offset  int64
		Columns []struct{ Name, Type string }
		Data    [][]string
	}
}

// TestDataAnalysisToggles: data_analysis is a catalogue tool like the others: off by
// default and not featured, switched per conversation and per agent, the toast on every
// switch, edit access to switch it, the deployment's policy above all.
func TestDataAnalysisToggles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.node()
	alice, _ := m.user(t, "alice", false)
	bob, bobID := m.user(t, "bob", false)
	var cat []struct {
		ID, Name  string
		Featured  bool
		Available bool
	}
	alice.must(200, "GET", "/api/v1/internal-tools", nil, &cat)
	found := false
	for _, tl := range cat {
		if tl.ID == "data_analysis" {
			found = tl.Name == "Data analysis" && !tl.Featured && tl.Available
		}
	}
	if !found {
		t.Fatalf("catalogue %+v lacks an available, unfeatured data_analysis", cat)
	}
	conv := alice.createConversation(0)
	if st := alice.tool(conv, "data_analysis"); st.Enabled || st.Source != "default" {
		t.Fatalf("new conversation: %+v", st)
	}
	ws := alice.socket()
	var st toolState
	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": true}, &st)
	if !st.Enabled || st.Source != "conversation" {
		t.Fatalf("after switching on: %+v", st)
	}
	toast := ws.expect("toast")
	var data map[string]any
	_ = json.Unmarshal(toast.Data, &data)
	if data["tool"] != "data_analysis" || data["tool_name"] != "Data analysis" || data["enabled"] != true {
		t.Fatalf("toast %s", toast.Data)
	}
	agent := alice.createAgent(map[string]any{"name": "Analyst", "internal_tools": map[string]bool{"data_analysis": true}})
	if st := alice.tool(alice.createConversation(agent.ID), "data_analysis"); !st.Enabled || st.Source != "agent" {
		t.Fatalf("agent's setting: %+v", st)
	}
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	bob.must(403, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": false}, nil)
	carol, _ := m.user(t, "carol", false)
	carol.must(404, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": false}, nil)

	m2 := e.node(func(c *Config, _ *Main) { c.ToolsDisabled = []string{"data_analysis"} })
	if st := m2.as(t, alice.token).tool(conv, "data_analysis"); st.Enabled || st.Source != "policy" || st.Available {
		t.Fatalf("disabled by policy: %+v", st)
	}
}

// TestFilePreview: GET …/files/{id}/preview reads an attachment as a table for the
// conversation's members, and says plainly what is not a table.
func TestFilePreview(t *testing.T) {
	t.Parallel()
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	bob, bobID := m.user(t, "bob", false)
	carol, _ := m.user(t, "carol", false)
	conv, other := alice.createConversation(0), alice.createConversation(0)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", conv), map[string]any{"user_id": bobID, "role": "viewer"}, nil)
	ids := map[string]int64{}
	uploads := map[string]string{"sales.csv": salesCSV, "book.xlsx": salesXLSX(t), "photo.png": "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "fake.xlsx": "a,b\n1,2\n",
		"bomb.xlsx": zipBomb(t), "wide.csv": strings.Repeat("1,", 1_000_000) + "1\n", "line.csv": strings.Repeat("x", 3<<20)}
	for name, content := range uploads {
		status, body := alice.uploadAt(conv, name, "", content)
		var ref struct{ ID int64 }
		if err := json.Unmarshal(body, &ref); status != 201 || err != nil {
			t.Fatalf("upload %s: %d %s", name, status, body)
		}
		ids[name] = ref.ID
	}
	url := func(conv int64, name, query string) string {
		return fmt.Sprintf("/api/v1/conversations/%d/files/%d/preview%s", conv, ids[name], query)
	}
	var p previewJSON
	bob.must(200, "GET", url(conv, "sales.csv", "?offset=1&rows=1"), nil, &p)
	if p.Format != "csv" || p.Delimiter != ";" || len(p.Sheets) != 1 {
		t.Fatalf("%+v", p)
	}
	sh := p.Sheets[0]
	types := []string{}
	for _, c := range sh.Columns {
		types = append(types, c.Name+":"+c.Type)
	}
	// 2,5 is not a number in a file whose delimiter is ';' and decimal mark a comma: text.
	if got := strings.Join(types, " "); got != "id:integer price:text day:date city:text" || sh.Rows != 3 || sh.Offset != 1 || len(sh.Data) != 1 || sh.Data[0][3] != "Lyon" {
		t.Fatalf("columns %s, sheet %+v", got, sh)
	}
	alice.must(200, "GET", url(conv, "book.xlsx", "?sheet=Orders"), nil, &p)
	if strings.Join(p.SheetNames, ",") != "Orders,Notes" || p.Sheets[0].Columns[0].Type != "date" || p.Sheets[0].Data[0][0] != "2024-05-01" {
		t.Fatalf("%+v", p)
	}
	for _, tc := range []struct {
		name   string
		client *client
		path   string
		want   int
		says   string
	}{
		{"a stranger", carol, url(conv, "sales.csv", ""), 404, ""},
		{"a file of another conversation", alice, url(other, "sales.csv", ""), 404, ""},
		{"an image", alice, url(conv, "photo.png", ""), 400, "photo.png is not a table"},
		{"a CSV named .xlsx", alice, url(conv, "fake.xlsx", ""), 400, "not one"},
		{"a zip bomb", alice, url(conv, "bomb.xlsx", ""), 413, "unpacks to more than"},
		{"a million columns", alice, url(conv, "wide.csv", ""), 400, "longer than 1048576 bytes"},
		{"a 3 MiB line", alice, url(conv, "line.csv", ""), 400, "longer than 1048576 bytes"},
		{"an unknown sheet", alice, url(conv, "book.xlsx", "?sheet=Nope"), 400, `no sheet named \"Nope\"`},
		{"too many rows", alice, url(conv, "sales.csv", "?rows=100000"), 400, "rows must be"},
		{"a negative offset", alice, url(conv, "sales.csv", "?offset=-1"), 400, "offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := tc.client.rawDo("GET", tc.path, nil)
			if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.says) {
				t.Fatalf("%d %s, want %d saying %q", resp.StatusCode, body, tc.want, tc.says)
			}
			tc.client.do("GET", tc.path, nil, nil) // the problem is well formed
		})
	}
}

// TestDataAnalysisBuiltin: the offline model describes an attachment a message names
// when data analysis is on, answers from the result, and says where the file is in
// Python when the sandbox is on too; with the tool off it calls nothing.
func TestDataAnalysisBuiltin(t *testing.T) {
	t.Parallel()
	m := newEnv(t).node()
	alice, _ := m.user(t, "alice", false)
	conv := alice.createConversation(0)
	alice.upload(conv, "sales.csv", salesCSV)
	alice.upload(conv, "book.xlsx", salesXLSX(t))
	toolsPath := fmt.Sprintf("/api/v1/conversations/%d/internal-tools/", conv)

	if _, answer := alice.say(conv, "What is in sales.csv?"); strings.Contains(answer, "integer") {
		t.Fatalf("with the tool off the model described the file: %q", answer)
	}
	alice.must(200, "PUT", toolsPath+"data_analysis", map[string]any{"enabled": true}, nil)
	status, answer := alice.say(conv, "What is in sales.csv?")
	for _, want := range []string{"sales.csv: CSV", `delimiter ";"`, "3 rows × 4 columns", "id (integer): 1 to 3, mean 2", "day (date): 2023-12-31 to 2024-03-01", `most frequent: "Paris" (2)`} {
		if status != "completed" || !strings.Contains(answer, want) {
			t.Fatalf("%s %q, want it to say %q", status, answer, want)
		}
	}
	if strings.Contains(answer, "/data/") {
		t.Fatalf("the Python line with the sandbox off: %q", answer)
	}
	msgs := alice.messages(conv)
	calls := storedCalls(t, msgs[len(msgs)-3])
	if len(calls) != 1 || calls[0].Name != "describe_file" || !strings.Contains(string(calls[0].Arguments), "sales.csv") {
		t.Fatalf("calls %+v", calls)
	}
	var result struct {
		Status string
		Table  struct{ Sheets []struct{ Data [][]string } }
	}
	if err := json.Unmarshal([]byte(msgs[len(msgs)-2].Content), &result); err != nil || result.Status != "ok" || result.Table.Sheets[0].Data[0][3] != "Paris" {
		t.Fatalf("stored result %s (%v)", msgs[len(msgs)-2].Content, err)
	}

	// This node runs no engine, so its sessions load no pandas: the code that loads a file
	// is the standard library's (with pandas where it loads: toolkits' TestPythonLoad).
	alice.must(200, "PUT", toolsPath+"pyodide_sandbox", map[string]any{"enabled": true}, nil)
	_, answer = alice.say(conv, "and book.xlsx?")
	for _, want := range []string{"book.xlsx: Excel workbook", "sheets: Orders, Notes", "day (date): 2024-05-01 to 2024-06-01", "In Python it is /data/book.xlsx",
		`with open("/data/book.xlsx.d/Orders.csv", newline="", encoding="utf-8")`, "/data/book.xlsx.d/Notes.csv", "pandas cannot be loaded on this server"} {
		if !strings.Contains(answer, want) {
			t.Fatalf("%q, want it to say %q", answer, want)
		}
	}
	if _, answer = alice.say(conv, "Describe sales.csv again"); !strings.Contains(answer, `rows = list(csv.DictReader(f, delimiter=";"))`) || strings.Contains(answer, "import pandas") {
		t.Fatalf("%q lacks the csv module's line", answer)
	}
}

// TestDataAnalysisOpenAI: through the OpenAI-compatible client the tools are offered
// with the attachments named, only while the tool is on, and their results reach the
// model as JSON with the summary.
func TestDataAnalysisOpenAI(t *testing.T) {
	t.Parallel()
	call := func(name, args string) openaitest.Reply {
		return openaitest.Reply{ToolCalls: []openaitest.Call{{Name: name, Arguments: args}}}
	}
	srv := openaitest.New(t,
		call("describe_file", `{"file":"/data/sales.csv"}`),
		call("preview_rows", `{"file":"sales.csv","offset":2,"rows":1}`),
		openaitest.Reply{Text: "Three sales."},
		// the tool is off: the model calls it anyway
		call("describe_file", `{"file":"sales.csv"}`),
		openaitest.Reply{Text: "It is off."},
	)
	m := newEnv(t).node(func(c *Config, _ *Main) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: srv.URL, APIKey: srv.APIKey, Model: "fake-model", MaxRetries: 1}
	})
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Analyst", "model": "fake-model", "internal_tools": map[string]bool{"data_analysis": true}})
	conv := alice.createConversation(agent.ID)
	alice.upload(conv, "sales.csv", salesCSV)

	if status, answer := alice.say(conv, "Look at my file."); status != "completed" || answer != "Three sales." {
		t.Fatalf("%s %q", status, answer)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	var names []string
	for _, tl := range reqs[0].Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "describe_file,preview_rows" || !strings.Contains(string(reqs[0].Tools[0].Parameters), `"enum":["sales.csv"]`) {
		t.Fatalf("tools offered %v %s", names, reqs[0].Tools[0].Parameters)
	}
	var described struct {
		Status, Summary string
		Table           struct {
			Sheets []struct{ Columns []struct{ Name, Type string } }
		}
	}
	if err := json.Unmarshal([]byte(lastTool(t, reqs[1]).Content), &described); err != nil || described.Status != "ok" ||
		described.Table.Sheets[0].Columns[2].Type != "date" || !strings.Contains(described.Summary, "3 rows × 4 columns") {
		t.Fatalf("describe_file result %q (%v)", lastTool(t, reqs[1]).Content, err)
	}
	var page struct {
		Table struct{ Sheets []struct{ Data [][]string } }
	}
	if err := json.Unmarshal([]byte(lastTool(t, reqs[2]).Content), &page); err != nil || len(page.Table.Sheets[0].Data) != 1 || page.Table.Sheets[0].Data[0][0] != "3" {
		t.Fatalf("preview_rows result %q (%v)", lastTool(t, reqs[2]).Content, err)
	}

	alice.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/data_analysis", conv), map[string]any{"enabled": false}, nil)
	if status, answer := alice.say(conv, "Again."); status != "completed" || answer != "It is off." {
		t.Fatalf("%s %q", status, answer)
	}
	reqs = srv.Requests()
	if len(reqs[3].Tools) != 0 {
		t.Fatalf("tools offered with data analysis off: %+v", reqs[3].Tools)
	}
	if res := lastTool(t, reqs[4]).Content; !strings.Contains(res, `"refused"`) || strings.Contains(res, "Paris") {
		t.Fatalf("a call to the tool that is off answered %q", res)
	}
}

// TestSheetCopies: with the real sandbox, each sheet of an uploaded workbook is a CSV
// file beside it under /data that the standard library reads; a new upload of the
// workbook changes its copies, in the same warm process too.
func TestSheetCopies(t *testing.T) {
	t.Parallel()
	m := newEnv(t).sandboxNode()
	alice, _ := m.user(t, "alice", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := alice.createConversation(agent.ID)
	if code := alice.upload(conv, "book.xlsx", salesXLSX(t)); code != 201 {
		t.Fatalf("upload: %d", code)
	}
	read := "import csv, os\nprint(sorted(os.listdir('/data/book.xlsx.d')))\nprint(list(csv.reader(open('/data/book.xlsx.d/Orders.csv'))))"
	for i, want := range []string{
		"['Notes.csv', 'Orders.csv']\n[['day', 'amount'], ['2024-05-01', '10.5'], ['2024-06-01', '20']]",
		"['Notes.csv', 'Orders.csv']\n[['day', 'amount'], ['2024-05-01', '10.5'], ['2024-06-01', '20']]", // the warm process holds them
	} {
		if r := alice.run(conv, read); r.Status != "success" || strings.TrimSpace(r.Stdout) != want {
			t.Fatalf("run %d: %+v, want %q", i+1, r, want)
		}
	}
	f := excelize.NewFile()
	f.SetSheetName("Sheet1", "Orders")
	f.SetSheetRow("Orders", "A1", &[]any{"day", "amount"})
	f.SetSheetRow("Orders", "A2", &[]any{"later", 7})
	var buf bytes.Buffer
	f.WriteTo(&buf)
	f.Close()
	if code := alice.upload(conv, "book.xlsx", buf.String()); code != 200 {
		t.Fatalf("replace: %d", code)
	}
	if r := alice.run(conv, read); r.Status != "success" || strings.TrimSpace(r.Stdout) != "['Orders.csv']\n[['day', 'amount'], ['later', '7']]" {
		t.Fatalf("after the new upload: %+v", r)
	}
}

// zipBomb is an .xlsx whose sheet declares a terabyte unpacked.
func zipBomb(t *testing.T) string {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("xl/workbook.xml")
	w.Write([]byte("<workbook/>"))
	raw, err := zw.CreateRaw(&zip.FileHeader{Name: "xl/worksheets/sheet1.xml", Method: zip.Deflate, CompressedSize64: 2, UncompressedSize64: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte{3, 0})
	zw.Close()
	return buf.String()
}
