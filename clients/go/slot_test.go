package ticketing

import (
	"strings"
	"testing"
)

// SPEC 15's test vectors: the slot is part of the protocol, pure.
func TestSlotVectors(t *testing.T) {
	vectors := map[string]uint32{
		"a":                           11404,
		"show-42":                     11909,
		"show-42:seat-17":             10735,
		"inventory/2026-12-24/hall-B": 10740,
		strings.Repeat("~", 250):      9293,
	}
	for key, want := range vectors {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%.20q) = %d, want %d", key, got, want)
		}
	}
	if Slot("show-42") == Slot("show-43") {
		t.Errorf("Slot ignores the last byte")
	}
}
