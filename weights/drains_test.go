package weights_test

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trafficmap/publisher/weights"
)

// parseCase is one ParseDrains table row; the rows also seed FuzzParseDrains.
type parseCase struct {
	name string
	in   string
	// want is the expected result when wantErr is empty.
	want []weights.Drain
	// wantErr is the exact expected error message (or its prefix when prefix is set).
	wantErr string
	prefix  bool
}

const seedAnnotation = `{"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`

var seedDrain = weights.Drain{ID: "maintenance-a", Cluster: "worker-a", Reason: "planned maintenance"}

var parseCases = []parseCase{
	// Valid values.
	{name: "empty object", in: `{}`, want: []weights.Drain{}},
	{name: "empty object with whitespace", in: " \n\t{ }\r\n ", want: []weights.Drain{}},
	{name: "seed", in: seedAnnotation, want: []weights.Drain{seedDrain}},
	{name: "whitespace around the whole value", in: "\n  " + seedAnnotation + "\n\t ", want: []weights.Drain{seedDrain}},
	{name: "fields in reverse order", in: `{"maintenance-a":{"reason":"planned maintenance","cluster":"worker-a"}}`, want: []weights.Drain{seedDrain}},
	{
		name: "unicode reason and id",
		in:   `{"wartung-ü":{"cluster":"worker-a","reason":"計画メンテナンス 🚧 inner  spaces"}}`,
		want: []weights.Drain{{ID: "wartung-ü", Cluster: "worker-a", Reason: "計画メンテナンス 🚧 inner  spaces"}},
	},
	{
		name: "escaped strings are decoded",
		in:   `{"\u006d-a":{"cluster":"worker\u002da","reason":"line\nbreak \"quoted\""}}`,
		want: []weights.Drain{{ID: "m-a", Cluster: "worker-a", Reason: "line\nbreak \"quoted\""}},
	},
	{
		name: "sorted by id regardless of member order",
		in:   `{"c":{"cluster":"worker-c","reason":"r"},"a":{"cluster":"worker-a","reason":"r"},"B":{"cluster":"worker-b","reason":"r"}}`,
		want: []weights.Drain{
			{ID: "B", Cluster: "worker-b", Reason: "r"},
			{ID: "a", Cluster: "worker-a", Reason: "r"},
			{ID: "c", Cluster: "worker-c", Reason: "r"},
		},
	},
	{
		name: "two drains on one cluster",
		in:   `{"upgrade":{"cluster":"worker-a","reason":"upgrade"},"maintenance-a":{"cluster":"worker-a","reason":"planned maintenance"}}`,
		want: []weights.Drain{seedDrain, {ID: "upgrade", Cluster: "worker-a", Reason: "upgrade"}},
	},
	{
		name: "character sets and lengths are not enforced",
		in:   `{"ID with spaces/and:colons":{"cluster":"Not_A_DNS_Name","reason":"x"}}`,
		want: []weights.Drain{{ID: "ID with spaces/and:colons", Cluster: "Not_A_DNS_Name", Reason: "x"}},
	},

	// Top level.
	{name: "empty input", in: ``, wantErr: "decode top-level object: EOF"},
	{name: "whitespace only", in: " \n\t", wantErr: "decode top-level object: EOF"},
	{name: "array", in: `[]`, wantErr: "top-level value must be a JSON object keyed by override ID"},
	{name: "null", in: `null`, wantErr: "top-level value must be a JSON object keyed by override ID"},
	{name: "string", in: `"x"`, wantErr: "top-level value must be a JSON object keyed by override ID"},
	{name: "number", in: `1`, wantErr: "top-level value must be a JSON object keyed by override ID"},
	{name: "boolean", in: `true`, wantErr: "top-level value must be a JSON object keyed by override ID"},
	{name: "not json", in: `maintenance-a`, wantErr: "decode top-level object: invalid character 'm' looking for beginning of value"},

	// Override IDs.
	{name: "empty id", in: `{"":{"cluster":"worker-a","reason":"r"}}`, wantErr: "override ID must be non-empty"},
	{name: "whitespace-only id", in: `{" \t":{"cluster":"worker-a","reason":"r"}}`, wantErr: "override ID must be non-empty"},
	{name: "id with leading whitespace", in: `{" a":{"cluster":"worker-a","reason":"r"}}`, wantErr: "override ID must not have leading or trailing whitespace"},
	{name: "id with trailing newline", in: `{"a\n":{"cluster":"worker-a","reason":"r"}}`, wantErr: "override ID must not have leading or trailing whitespace"},
	{name: "duplicate id", in: `{"a":{"cluster":"worker-a","reason":"r"},"a":{"cluster":"worker-b","reason":"r"}}`, wantErr: `duplicate override ID "a"`},
	{name: "duplicate id after unescaping", in: `{"a":{"cluster":"worker-a","reason":"r"},"\u0061":{"cluster":"worker-a","reason":"r"}}`, wantErr: `duplicate override ID "a"`},

	// Override values.
	{name: "value is a string", in: `{"a":"worker-a"}`, wantErr: `override "a" must be a JSON object`},
	{name: "value is an array", in: `{"a":["worker-a"]}`, wantErr: `override "a" must be a JSON object`},
	{name: "value is null", in: `{"a":null}`, wantErr: `override "a" must be a JSON object`},
	{name: "value is a number", in: `{"a":1}`, wantErr: `override "a" must be a JSON object`},
	{name: "unknown field", in: `{"a":{"cluster":"worker-a","reason":"r","owner":"me"}}`, wantErr: `override "a" has unknown field "owner"`},
	{name: "field names are case-sensitive", in: `{"a":{"Cluster":"worker-a","reason":"r"}}`, wantErr: `override "a" has unknown field "Cluster"`},
	{name: "duplicate cluster field", in: `{"a":{"cluster":"worker-a","cluster":"worker-b","reason":"r"}}`, wantErr: `override "a" has duplicate field "cluster"`},
	{name: "duplicate reason field", in: `{"a":{"reason":"r","cluster":"worker-a","reason":"r"}}`, wantErr: `override "a" has duplicate field "reason"`},
	{name: "cluster is a number", in: `{"a":{"cluster":1,"reason":"r"}}`, wantErr: `override "a" field "cluster" must be a string: got number 1`},
	{name: "cluster is a huge number", in: `{"a":{"cluster":1e999,"reason":"r"}}`, wantErr: `override "a" field "cluster" must be a string: got number 1e999`},
	{name: "reason is null", in: `{"a":{"cluster":"worker-a","reason":null}}`, wantErr: `override "a" field "reason" must be a string: got null`},
	{name: "reason is a boolean", in: `{"a":{"cluster":"worker-a","reason":false}}`, wantErr: `override "a" field "reason" must be a string: got boolean false`},
	{name: "cluster is an object", in: `{"a":{"cluster":{},"reason":"r"}}`, wantErr: `override "a" field "cluster" must be a string: got object`},
	{name: "cluster is an array", in: `{"a":{"cluster":["worker-a"],"reason":"r"}}`, wantErr: `override "a" field "cluster" must be a string: got array`},
	{name: "missing cluster", in: `{"a":{"reason":"r"}}`, wantErr: `override "a" cluster must be non-empty`},
	{name: "empty cluster", in: `{"a":{"cluster":"","reason":"r"}}`, wantErr: `override "a" cluster must be non-empty`},
	{name: "whitespace-only cluster", in: `{"a":{"cluster":"  ","reason":"r"}}`, wantErr: `override "a" cluster must be non-empty`},
	{name: "cluster with surrounding whitespace", in: `{"a":{"cluster":" worker-a","reason":"r"}}`, wantErr: `override "a" cluster must not have leading or trailing whitespace`},
	{name: "missing reason", in: `{"a":{"cluster":"worker-a"}}`, wantErr: `override "a" reason must be non-empty`},
	{name: "empty object value", in: `{"a":{}}`, wantErr: `override "a" cluster must be non-empty`},
	{name: "empty reason", in: `{"a":{"cluster":"worker-a","reason":""}}`, wantErr: `override "a" reason must be non-empty`},
	{name: "whitespace-only reason", in: `{"a":{"cluster":"worker-a","reason":"\n\t"}}`, wantErr: `override "a" reason must be non-empty`},
	{name: "reason with trailing whitespace", in: `{"a":{"cluster":"worker-a","reason":"r\n"}}`, wantErr: `override "a" reason must not have leading or trailing whitespace`},

	// Trailing data.
	{name: "second object", in: `{} {}`, wantErr: "unexpected trailing JSON token after top-level object: got object"},
	{name: "trailing garbage", in: `{}x`, wantErr: "unexpected trailing JSON token after top-level object: invalid character 'x' looking for beginning of value"},
	{name: "trailing string", in: seedAnnotation + ` "x"`, wantErr: `unexpected trailing JSON token after top-level object: got string "x"`},
	{name: "trailing close brace", in: `{}}`, wantErr: "unexpected trailing JSON token", prefix: true},

	// Malformed JSON inside.
	{name: "unterminated top-level object", in: `{`, wantErr: "close top-level object: unexpected EOF"},
	{name: "truncated after id", in: `{"a":`, wantErr: `override "a": decode value: unexpected EOF`},
	{name: "missing colon", in: `{"a" {}}`, wantErr: `override "a": decode value: invalid character '{' after object key`},
	{name: "unterminated override", in: `{"a":{"cluster":"worker-a"`, wantErr: `override "a": close object: unexpected EOF`},
	{name: "trailing comma in override", in: `{"a":{"cluster":"worker-a",}}`, wantErr: `override "a": decode field name: invalid character '}' looking for beginning of object key string`},
	{name: "bad literal", in: `{"a":{"cluster":tru}}`, wantErr: `override "a" field "cluster": decode value: invalid character '}' in literal true (expecting 'e')`},
	{name: "truncated after last override", in: `{"a":{"cluster":"worker-a","reason":"r"}`, wantErr: "close top-level object: unexpected EOF"},
	{name: "trailing comma at top level", in: `{"a":{"cluster":"worker-a","reason":"r"},}`, wantErr: "decode override ID: invalid character '}' looking for beginning of object key string"},
}

func TestParseDrains(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := weights.ParseDrains(tc.in)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, got, "a valid value yields a non-nil slice")
				assert.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			assert.Nil(t, got)
			if tc.prefix {
				assert.True(t, strings.HasPrefix(err.Error(), tc.wantErr), "error %q lacks prefix %q", err, tc.wantErr)
			} else {
				assert.EqualError(t, err, tc.wantErr)
			}
		})
	}
}

func TestParseDrainsRejectionCount(t *testing.T) {
	var rejections int
	for _, tc := range parseCases {
		if tc.wantErr != "" {
			rejections++
		}
	}
	assert.GreaterOrEqual(t, rejections, 15)
}

func TestParseDrainsEmptyWrapsEOF(t *testing.T) {
	_, err := weights.ParseDrains("")
	require.ErrorIs(t, err, io.EOF)

	_, err = weights.ParseDrains(`{"a":`)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestDrainAnnotation(t *testing.T) {
	assert.Equal(t, "ome.io/traffic-drain", weights.DrainAnnotation)
	assert.Equal(t, 1_000_000, weights.MaxWeight)
}
