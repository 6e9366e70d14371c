package plandelta

import (
	"reflect"
	"testing"
)

// TestMarshalWithHead: deltaJSON has Delta's fields, with the same JSON
// names and options, in the same order, the head first (MarshalWithHead
// relies on it); the round trips of plandelta_test compare the bytes.
func TestMarshalWithHead(t *testing.T) {
	a, b := reflect.TypeFor[Delta](), reflect.TypeFor[deltaJSON]()
	if a.NumField() != b.NumField() {
		t.Fatalf("Delta has %d fields, deltaJSON %d: add the new field to deltaJSON and MarshalWithHead", a.NumField(), b.NumField())
	}
	for i := range a.NumField() {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || fa.Tag != fb.Tag || (fa.Name != "Head" && fa.Type != fb.Type) {
			t.Errorf("field %d: Delta's %s %v `%s`, deltaJSON's %s %v `%s`", i, fa.Name, fa.Type, fa.Tag, fb.Name, fb.Type, fb.Tag)
		}
	}
	if a.Field(0).Name != "Head" {
		t.Error("the head is not Delta's first field")
	}
}
