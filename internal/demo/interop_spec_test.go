package demo_test

import (
	"os"
	"testing"

	"github.com/fednet/fednet/internal/demo"
)

// TestInteropExample keeps examples/interop.yaml and the spec `fednet lab
// interop` runs the same text.
func TestInteropExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/interop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != demo.InteropSpecYAML {
		t.Errorf("examples/interop.yaml differs from demo.InteropSpecYAML; keep them equal")
	}
}
