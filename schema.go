package helix

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	printer        = message.NewPrinter(language.English)
)

// SchemaFor derives the JSON Schema of T: inline (no $ref or $defs), without
// $schema or $id, objects closed with additionalProperties false, every
// field without omitempty required. invopop/jsonschema struct tags refine it,
// for example `jsonschema:"description=City name,enum=metric,enum=imperial,minimum=1"`.
//
// json.RawMessage and maps derive as "any object"; interface types (any)
// derive as "any value".
func SchemaFor[T any]() (json.RawMessage, error) {
	return schemaForType(reflect.TypeFor[T]())
}

func schemaForType(t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawMessageType:
		return json.RawMessage(`{"type":"object"}`), nil
	case t.Kind() == reflect.Interface:
		return json.RawMessage(`{}`), nil
	}
	r := &jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true}
	s := r.ReflectFromType(t)
	s.Version, s.ID = "", ""
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("helix: derive JSON Schema of %s: %w", t, err)
	}
	return b, nil
}

// Schema is a compiled JSON Schema used to validate documents. It is safe for
// concurrent use.
type Schema struct {
	raw      json.RawMessage
	compiled *sjs.Schema
}

// CompileSchema compiles a JSON Schema (draft 2020-12 unless it declares
// another draft with $schema). It reports an invalid schema clearly.
func CompileSchema(schema json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return nil, errors.New("helix: JSON Schema is empty")
	}
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("helix: JSON Schema is not valid JSON: %w", err)
	}
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	const loc = "mem://helix/schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("helix: invalid JSON Schema: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("helix: invalid JSON Schema: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, schema); err != nil {
		return nil, fmt.Errorf("helix: JSON Schema is not valid JSON: %w", err)
	}
	return &Schema{raw: compact.Bytes(), compiled: compiled}, nil
}

// Raw returns the schema as compact JSON.
func (s *Schema) Raw() json.RawMessage { return s.raw }

// IsObject reports whether the schema constrains documents to JSON objects
// ("type": "object", or a schema with properties and no other type).
func (s *Schema) IsObject() bool {
	var m map[string]any
	if json.Unmarshal(s.raw, &m) != nil {
		return false
	}
	switch t := m["type"].(type) {
	case string:
		return t == "object"
	case nil:
		_, props := m["properties"]
		return props
	}
	return false
}

// Validate checks doc against the schema. It returns nil or a
// *ValidationError listing every violation with its JSON pointer (a document
// that is not JSON is one violation at the root). subject names the document
// in the error message, e.g. `arguments of tool "search"`.
func (s *Schema) Validate(subject string, doc json.RawMessage) error {
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return &ValidationError{Subject: subject, Violations: []Violation{{Pointer: "", Message: "not valid JSON: " + err.Error()}}}
	}
	err = s.compiled.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *sjs.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Subject: subject, Violations: []Violation{{Message: err.Error()}}}
	}
	var out []Violation
	collectViolations(ve, &out)
	slices.SortFunc(out, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Message, b.Message))
	})
	out = slices.Compact(out)
	return &ValidationError{Subject: subject, Violations: out}
}

// collectViolations gathers the leaf errors of a validation error tree: the
// leaves are the specific problems ("missing property 'q'"), the inner
// nodes only say that a subschema failed.
func collectViolations(e *sjs.ValidationError, out *[]Violation) {
	if len(e.Causes) == 0 {
		*out = append(*out, Violation{
			Pointer: jsonPointer(e.InstanceLocation),
			Message: e.ErrorKind.LocalizedString(printer),
		})
		return
	}
	for _, c := range e.Causes {
		collectViolations(c, out)
	}
}

// jsonPointer renders path segments as an RFC 6901 pointer.
func jsonPointer(segments []string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s))
	}
	return b.String()
}
