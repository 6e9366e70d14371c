package api

import (
	"strings"
	"testing"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	jt := JoinToken{Manager: "https://203.0.113.5:7443", CAFingerprint: strings.Repeat("ab", 32), ID: "3f9ce1a2", Secret: "s3cr3t"}
	got, err := ParseJoinToken("  " + jt.String() + "\n")
	if err != nil || got != jt {
		t.Fatalf("ParseJoinToken(String()) = %+v, %v; want %+v", got, err, jt)
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
		if err != nil || again != jt {
			t.Fatalf("round trip of %+v: %+v, %v", jt, again, err)
		}
	})
}
