package workflows

import (
	"errors"
	"reflect"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// executionOwner returns the owner token DBOS gave this execution of its
// workflow when it started it (dbos.workflow_status.owner_xid as this
// execution claimed it): the token every write of the execution is fenced
// by. It must come from the execution, not from the workflow's row: an
// execution that stalls between DBOS's claim and its first read (a frozen
// process) would read the token of the execution that took the workflow
// over meanwhile, and its writes would pass for that one's (a zombie's
// records in the new owner's journal).
//
// DBOS keeps the token in the workflow's context under an unexported key,
// which this reads by reflection (DBOS v1.8.0's layout, pinned in go.mod;
// TestExecutionOwnerIsTheClaimedToken fails if an upgrade moves it).
func executionOwner(ctx dbos.Context) (string, error) {
	v, ok := structOf(reflect.ValueOf(ctx))
	if !ok {
		return "", errOwnerUnknown
	}
	c := v.FieldByName("ctx")
	// Walk the standard library's context chain: values, cancellations,
	// deadlines, each holding its parent.
	for depth := 0; depth < 64 && c.IsValid(); depth++ {
		if c, ok = structOf(c); !ok {
			return "", errOwnerUnknown
		}
		if key := c.FieldByName("key"); key.IsValid() && key.Kind() == reflect.Interface && !key.IsNil() {
			k := key.Elem()
			if k.Kind() == reflect.String && k.Type().Name() == "dbosContextKey" && k.String() == "workflowState" {
				state, ok := structOf(c.FieldByName("val"))
				if !ok {
					return "", errOwnerUnknown
				}
				owner := state.FieldByName("ownerXID")
				if !owner.IsValid() || owner.Kind() != reflect.String || owner.String() == "" {
					return "", errOwnerUnknown
				}
				return owner.String(), nil
			}
		}
		next := c.FieldByName("Context")
		if !next.IsValid() {
			next = c.FieldByName("c") // context.withoutCancelCtx
		}
		c = next
	}
	return "", errOwnerUnknown
}

// structOf follows v's pointers and interfaces to the struct they hold
// (false: a nil on the way, or no struct at the end).
func structOf(v reflect.Value) (reflect.Value, bool) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return v, false
		}
		v = v.Elem()
	}
	return v, v.Kind() == reflect.Struct
}

var errOwnerUnknown = errors.New("helix-dbos cannot read the owner token DBOS gave this workflow execution " +
	"(its context is not a DBOS v1.8 workflow context: was DBOS upgraded past the version helix-dbos pins?)")
