// Package pgtext tells request bodies whose strings Postgres cannot store:
// its text and jsonb types refuse U+0000, so such a body reaching the
// database fails with an error the server would report as internal. The
// routes of server and server/aisdk refuse it up front instead.
package pgtext

import (
	"bytes"
	"encoding/json"
	"strings"
)

// JSONHasNUL reports whether a JSON document has a string (a value or a
// key) containing U+0000, which JSON can only write as the escape \u0000.
// A document that is not valid JSON reports false: its decoding fails on
// its own.
func JSONHasNUL(data []byte) bool {
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return false // the only way to write U+0000 in JSON
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
}
