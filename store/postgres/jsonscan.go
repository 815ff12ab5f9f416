package postgres

import (
	"bytes"
	"encoding/json"
)

// member is one member of a JSON object: its key as written (quotes and
// escapes included) and its value's bytes.
type member struct{ key, val []byte }

// objectFields appends the members of the JSON object b to dst. b is valid
// JSON (json.Marshal wrote it, or Postgres checked it); the members' bytes
// are b's.
func objectFields(dst []member, b []byte) ([]member, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for i < len(b) {
		k0 := i
		k1, ok := skipValue(b, k0)
		if !ok || b[k0] != '"' {
			return nil, false
		}
		if i = skipSpace(b, k1); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		v0 := skipSpace(b, i+1)
		v1, ok := skipValue(b, v0)
		if !ok {
			return nil, false
		}
		dst = append(dst, member{b[k0:k1:k1], b[v0:v1:v1]})
		if i = skipSpace(b, v1); i < len(b) && b[i] == '}' {
			return dst, skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	return nil, false
}

// arrayElems appends the elements of the JSON array b to dst, as
// objectFields.
func arrayElems(dst [][]byte, b []byte) ([][]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return dst, skipSpace(b, i+1) == len(b)
	}
	for i < len(b) {
		v1, ok := skipValue(b, i)
		if !ok {
			return nil, false
		}
		dst = append(dst, b[i:v1:v1])
		if i = skipSpace(b, v1); i < len(b) && b[i] == ']' {
			return dst, skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
	return nil, false
}

// skipValue returns the end of the JSON value at b[i].
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		return 0, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && !isDelimiter(b[j]) {
		j++
	}
	return j, j > i
}

// isDelimiter reports whether c ends a JSON number or literal.
func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', ']', '}', '[', '{', '"', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// skipSpace returns the index of the first byte at or after b[i] that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// appendObject appends {fields} to buf, leaving out those of skip.
func appendObject(buf []byte, fields, skip []member) []byte {
	buf = append(buf, '{')
	first := true
	for _, f := range fields {
		if skip != nil && hasMember(skip, f) {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(append(append(buf, f.key...), ':'), f.val...)
	}
	return append(buf, '}')
}

// appendJSONString appends s as json.Marshal writes it.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(buf, b...)
		}
	}
	return append(append(append(buf, '"'), s...), '"')
}

// unquote returns the string a JSON string holds.
func unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	var s string
	return s, json.Unmarshal(v, &s) == nil
}

// valueOf returns the value of fields' member key, or nil.
func valueOf(fields []member, key []byte) []byte {
	if i := indexKey(fields, key); i >= 0 {
		return fields[i].val
	}
	return nil
}

// indexKey returns the index of fields' member key, or -1.
func indexKey(fields []member, key []byte) int {
	for i, f := range fields {
		if bytes.Equal(f.key, key) {
			return i
		}
	}
	return -1
}

// hasMember reports whether fields has f's key with f's value bytes.
func hasMember(fields []member, f member) bool {
	i := indexKey(fields, f.key)
	return i >= 0 && bytes.Equal(fields[i].val, f.val)
}

// sameMembers reports whether two objects have the same members, in any
// order; b has no key twice.
func sameMembers(a, b []member) bool {
	if len(a) != len(b) {
		return false
	}
	for _, f := range b {
		if !hasMember(a, f) {
			return false // with len(a) == len(b), a has every member of b, once
		}
	}
	return true
}
