package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDebugProfilesOnlyWhenEnabled: /debug/pprof/ is a 404 by default and
// serves the profile index once WithDebug is set.
func TestDebugProfilesOnlyWhenEnabled(t *testing.T) {
	get := func(h http.Handler) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil))
		return rec
	}
	if rec := get(NewHandler(nil, nil)); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("without debug: %d %s", rec.Code, rec.Body)
	}
	if rec := get(NewHandler(nil, nil).WithDebug()); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("with debug: %d %s", rec.Code, rec.Body)
	}
}

// Answers are compact unless the request asks ?pretty.
func TestAnswersAreCompactUnlessPretty(t *testing.T) {
	get := func(target string) string {
		rec := httptest.NewRecorder()
		NewHandler(nil, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q", target, rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	if body := get("/v1/nope"); strings.Count(body, "\n") != 1 || !strings.HasPrefix(body, `{"error":`) {
		t.Errorf("default answer is not compact: %q", body)
	}
	if body := get("/v1/nope?pretty"); !strings.HasPrefix(body, "{\n  \"error\": ") {
		t.Errorf("?pretty answer is not indented: %q", body)
	}
}
