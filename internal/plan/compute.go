package plan

import "github.com/fednet/fednet/internal/spec"

// Inputs are what the planner needs beyond the spec.
type Inputs struct {
	// PublicKeys by gateway name; a key here wins over the spec's publicKey.
	PublicKeys map[string]Key
}

// Compute returns the plan of every gateway of f, sorted by gateway name.
// f must have passed spec.Parse (defaults filled, validated).
func Compute(f *spec.Federation, in Inputs) ([]Gateway, error) {
	panic("not yet")
}
