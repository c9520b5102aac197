package dashboard_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every environment variable the dashboard names in its text is one the
// broker reads: the Spool page told operators to set QUEEN_SPOOL_DIR,
// which nothing reads (the spool's directory is FILE_BUFFER_DIR).
func TestDashboardNamesRealVariables(t *testing.T) {
	app, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("../config/config.go")
	if err != nil {
		t.Fatal(err)
	}
	literal := regexp.MustCompile(`'(?:[^'\\\n]|\\.)*'`)
	name := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b`)
	seen := 0
	for _, lit := range literal.FindAllString(string(app), -1) {
		for _, v := range name.FindAllString(lit, -1) {
			seen++
			if !strings.Contains(string(cfg), `"`+v+`"`) {
				t.Errorf("the dashboard names %s (in %s), which queen/config does not read", v, lit)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no variable named in the dashboard's text: the test checks nothing")
	}
}
