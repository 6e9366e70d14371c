package api

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	jt := JoinToken{Manager: "https://203.0.113.5:7443", CAFingerprint: strings.Repeat("ab", 32), ID: "3f9ce1a2", Secret: "s3cr3t"}
	got, err := ParseJoinToken("  " + jt.String() + "\n")
	if err != nil || !reflect.DeepEqual(got, jt) {
		t.Fatalf("ParseJoinToken(String()) = %+v, %v; want %+v", got, err, jt)
	}
	if !slices.Equal(got.URLs(), []string{jt.Manager}) {
		t.Errorf("URLs of a one-manager token = %v", got.URLs())
	}
	// Several managers: every URL, the token's own first.
	multi := jt
	multi.Managers = []string{"https://203.0.113.5:7443", "https://203.0.113.6:7443", "https://203.0.113.7:7443"}
	got, err = ParseJoinToken(multi.String())
	if err != nil || !reflect.DeepEqual(got, multi) || !slices.Equal(got.URLs(), multi.Managers) {
		t.Fatalf("token with three managers: %+v (URLs %v), %v", got, got.URLs(), err)
	}
	// A token of an older fednet (no "ms") parses as one manager.
	old := JoinTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"m":"https://m:7443","ca":"ab","id":"i","s":"s"}`))
	if got, err := ParseJoinToken(old); err != nil || !slices.Equal(got.URLs(), []string{"https://m:7443"}) {
		t.Errorf("an old token: %+v, %v", got, err)
	}
	for in, want := range map[string]string{
		"":                               "not a join token",
		"hello":                          "not a join token",
		JoinTokenPrefix + "!!":           "not base64url",
		JoinTokenPrefix + "bm90IGpzb24":  "bad content",
		JoinToken{Manager: "x"}.String(): "incomplete",
	} {
		if _, err := ParseJoinToken(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseJoinToken(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

// FuzzParseJoinToken: no input makes ParseJoinToken panic; what it accepts
// has every field, and encodes back to a token that parses the same.
func FuzzParseJoinToken(f *testing.F) {
	f.Add(JoinToken{Manager: "https://m:7443", CAFingerprint: "ab", ID: "id", Secret: "s"}.String())
	f.Add(JoinTokenPrefix)
	f.Add(JoinTokenPrefix + "e30")
	f.Add(JoinTokenPrefix + "eyJtIjoieCIsImNhIjoieSIsImlkIjoieiIsInMiOiJ3In0")
	f.Add("fednetjoin1.!!")
	f.Fuzz(func(t *testing.T, s string) {
		jt, err := ParseJoinToken(s)
		if err != nil {
			return
		}
		if jt.Manager == "" || jt.CAFingerprint == "" || jt.ID == "" || jt.Secret == "" {
			t.Fatalf("accepted %q with an empty field: %+v", s, jt)
		}
		again, err := ParseJoinToken(jt.String())
		if err != nil || !reflect.DeepEqual(again, jt) {
			t.Fatalf("round trip of %+v: %+v, %v", jt, again, err)
		}
	})
}
