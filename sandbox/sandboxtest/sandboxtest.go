// Package sandboxtest holds Python fixtures that the engine's tests and the API's tests
// share, so each scenario is written once.
package sandboxtest

import _ "embed"

// RichDisplay defines, in a session, Table (shown as HTML, "Table(sales=42)" as text)
// and Picture (a 12×8 PNG built without packages), plus make_png(w, h).
//
//go:embed rich_display.py
var RichDisplay string
