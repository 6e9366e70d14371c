package manager

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/bench/controlplane/cpspec"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// benchStates returns the state of n gateways planned from the bench's
// spec of n sites (cpspec.Federation), then the state with a bridged
// network added over them, and the change that made it.
func benchStates(t testing.TB, n int) (before, after *state, change store.Change) {
	keys := make([]plan.Key, n)
	for i := range keys {
		rand.Read(keys[i][:])
	}
	cur := &state{gateways: map[string]store.Gateway{}, hosts: map[string]store.Host{}, plans: map[string]planEntry{}}
	for i, doc := range []string{cpspec.Federation(keys, n, "", false), cpspec.Federation(keys, n, "", true)} {
		fed, err := spec.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		u := &update{next: cur.clone(), bump: map[string]bool{}, dirty: map[string]bool{}}
		u.next.fed, u.next.rev = fed, store.Revision{Number: i + 1, YAML: doc}
		for j := range n {
			name := fmt.Sprintf("g%04d", j)
			u.next.gateways[name] = store.Gateway{Name: name, PublicKey: keys[j]}
		}
		if _, err = preview(u, cur); err != nil {
			t.Fatal(err)
		}
		before, cur, change = cur, u.next, u.change
	}
	return before, cur, change
}

// TestDeltaAnswerGzipped checks that a delta answer with Local, gzipped
// in pieces (the Local's delta and the tail gzipped once for every plan),
// is the plain answer, for rotateKey 0 and another.
func TestDeltaAnswerGzipped(t *testing.T) {
	_, st, _ := benchStates(t, 20)
	for _, rotate := range []int{0, 3} {
		for _, name := range []string{"g0000", "g0007"} {
			e := st.plans[name]
			body, z := e.answers.delta(e, rotate, newest, st.local)
			if body == nil || z == nil {
				t.Fatalf("rotate %d: %s: no delta answer (%d pieces) or no gzipped one (%d)", rotate, name, len(body), len(z))
			}
			zr, err := gzip.NewReader(bytes.NewReader(bytes.Join(z, nil)))
			if err != nil {
				t.Fatal(err)
			}
			unzipped, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if plain := bytes.Join(body, nil); !bytes.Equal(unzipped, plain) {
				t.Fatalf("rotate %d: %s: gzipped answer is\n%s\nnot\n%s", rotate, name, unzipped, plain)
			}
			var out api.PlanResponse
			if err := json.Unmarshal(unzipped, &out); err != nil || out.Delta == nil || out.Delta.Local == nil || out.RotateKey != rotate {
				t.Fatalf("rotate %d: %s: answer %.200s: %v (rotateKey %d)", rotate, name, unzipped, err, out.RotateKey)
			}
		}
	}
}

// TestGzipPiece checks that a piece under storeBelow is stored (its size
// and at most 32 bytes of a gzip member's framing and stored blocks' headers)
// and one above it compressed, and that both read back.
func TestGzipPiece(t *testing.T) {
	for _, n := range []int{0, 17, storeBelow - 1, storeBelow, 8 * storeBelow} {
		b := bytes.Repeat([]byte(`{"peer":"s0001","allowedIPs":["10.1.0.0/24"]},`), n/46+1)[:n]
		z := gzipPiece(b)
		switch {
		case n < storeBelow && (len(z) < n || len(z) > n+32):
			t.Errorf("%d bytes: a member of %d bytes, want %d to %d (stored)", n, len(z), n, n+32)
		case n >= storeBelow && len(z) >= n/2:
			t.Errorf("%d bytes: a member of %d bytes, want it compressed", n, len(z))
		}
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		back, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("%d bytes: read back %d bytes (%v), not the piece", n, len(back), err)
		}
	}
}
