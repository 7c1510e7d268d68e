package probe

import (
	"strings"
	"testing"
)

// TestVisibilitySQL: the primary's list is text, and the replica's count
// takes it as its one parameter.
func TestVisibilitySQL(t *testing.T) {
	if !strings.HasPrefix(PrimaryHiddenSQL, "SELECT coalesce(array_agg(x), '{}')::text") {
		t.Errorf("PrimaryHiddenSQL does not answer an xid8 array as text: %s", PrimaryHiddenSQL)
	}
	if strings.Contains(PrimaryHiddenSQL, "$") {
		t.Errorf("PrimaryHiddenSQL takes a parameter: %s", PrimaryHiddenSQL)
	}
	if !strings.Contains(ReplicaShowsSQL, "$1::text::xid8[]") || strings.Contains(ReplicaShowsSQL, "$2") {
		t.Errorf("ReplicaShowsSQL does not take the list as its one parameter: %s", ReplicaShowsSQL)
	}
	for _, q := range []string{PrimaryHiddenSQL, ReplicaShowsSQL} {
		if strings.Contains(q, ";") {
			t.Errorf("more than one statement: %s", q)
		}
	}
}
