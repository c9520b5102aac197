package limits_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/queen-go/queen/queen/limits"
	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// jsonbTakes asks PostgreSQL itself whether jsonb stores doc.
func jsonbTakes(pool *pgxpool.Pool, doc string) bool {
	var n int
	err := pool.QueryRow(context.Background(), `SELECT length($1::jsonb::text)`, doc).Scan(&n)
	return err == nil
}

// TestJSONAgreesWithPostgreSQL: limits.JSON accepts a number exactly when
// PostgreSQL's jsonb does, on numbers drawn around every bound numeric has.
func TestJSONAgreesWithPostgreSQL(t *testing.T) {
	pool := storetest.Pool(t)
	digits := func(n int, first string) string {
		if n == 0 {
			return ""
		}
		return first + strings.Repeat("7", n-1)
	}
	near := func(t *rapid.T, label string, bound int) int {
		return rapid.OneOf(rapid.IntRange(0, 3), rapid.IntRange(bound-1, bound+1)).Draw(t, label)
	}
	rapid.Check(t, func(t *rapid.T) {
		num := ""
		if rapid.Bool().Draw(t, "neg") {
			num = "-"
		}
		zero := rapid.IntRange(0, 4).Draw(t, "zero") == 0
		intDigits := near(t, "int", 131072)
		if zero || intDigits == 0 {
			num += "0"
		} else {
			num += digits(intDigits, "1")
		}
		if f := near(t, "frac", 16383); f > 0 && zero {
			num += "." + strings.Repeat("0", f)
		} else if f > 0 {
			num += "." + digits(f, "3")
		}
		switch rapid.IntRange(0, 3).Draw(t, "expKind") {
		case 1:
			num += "e" + strconv.Itoa(rapid.OneOf(rapid.IntRange(-2, 2), rapid.IntRange(-16385, -16380), rapid.IntRange(131069, 131073)).Draw(t, "exp"))
		case 2:
			num += "E+" + strconv.Itoa(rapid.IntRange(1073741820, 1073741826).Draw(t, "bigExp"))
		case 3:
			num += "e-" + strconv.Itoa(rapid.OneOf(rapid.IntRange(16380, 16386), rapid.IntRange(1073741820, 1073741826)).Draw(t, "negExp"))
		}
		doc := `{"n":` + num + `}`
		got := limits.JSON("payload", []byte(doc)) == nil
		if want := jsonbTakes(pool, doc); got != want {
			t.Fatalf("limits.JSON says %v, PostgreSQL says %v, for %s", got, want, clipped(num))
		}
	})
}

func TestJSONStringsAgreeWithPostgreSQL(t *testing.T) {
	pool := storetest.Pool(t)
	for _, doc := range []string{
		`{"a":"plain"}`, `{"a":"\u0041\u00e9"}`, `{"a":"\\u0000 is text"}`, `{"a":"\ud83d\ude00"}`,
		`{"a":"x\u0000y"}`, `{"\u0000":1}`, `{"a":"\ud83d"}`, `{"a":"\ude00"}`, `{"a":"\\\u0000"}`,
		`[1,2,{"b":["\u0000"]}]`, `"\ud83d\u0041"`, "{\"a\":\"\xff\"}", "\"\xed\xa0\x80\"",
		`[1e131071, -0.5e-16382, 0e1073741822]`, `{"n":1e200000}`, `[true,false,null,"1e999999"]`,
		// A number ending the document, nines after the point (mutation
		// testing found no test had either), and the surrogate ranges' ends.
		`12.99`, `-0.909e-9`, `"\ud800\udc00"`, `"\udbff\udfff"`, `"\ud7ff\ue000"`,
	} {
		got := limits.JSON("payload", []byte(doc)) == nil
		if want := jsonbTakes(pool, doc); got != want {
			t.Errorf("limits.JSON says %v, PostgreSQL says %v, for %q", got, want, doc)
		}
	}
}

func TestFieldCheck(t *testing.T) {
	for _, c := range []struct {
		f    limits.Field
		v    string
		want string // "" accepts
	}{
		{limits.Queue, strings.Repeat("q", 255), ""},
		{limits.Queue, strings.Repeat("q", 256), "items[0].queue is 256 bytes, the limit is 255"},
		{limits.Queue, strings.Repeat("é", 128), "items[0].queue is 256 bytes, the limit is 255"}, // bytes, not characters
		{limits.Queue, "a\tb", "items[0].queue must not contain control characters"},
		{limits.TransactionID, strings.Repeat("t", 1024), ""},
		{limits.TransactionID, strings.Repeat("t", 1025), "items[0].transactionId is 1025 bytes, the limit is 1024"},
		{limits.TraceID, "not-a-uuid", "items[0].traceId must be a UUID"},
		{limits.TraceID, "", ""},
		{limits.ErrorText, "line one\nline two", ""},
		{limits.ErrorText, "nul\x00", "items[0].error must not contain a NUL character"},
		{limits.Queue, "bad\xff", "items[0].queue is not valid UTF-8"},
	} {
		err := c.f.Check("items[0].", c.v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s %q: got %q, want %q", c.f.Name, clipped(c.v), got, c.want)
		}
	}
	if err := limits.KVKey.Within(16, "", strings.Repeat("k", 17)); err == nil || err.Error() != "key is 17 bytes, the limit is 16" {
		t.Errorf("a configured bound below the table's: %v", err)
	}
}

func clipped(s string) string {
	if len(s) > 60 {
		return s[:30] + "…(" + strconv.Itoa(len(s)) + " bytes)…" + s[len(s)-20:]
	}
	return s
}

// A count is taken up to its bound and refused past it, naming the field.
func TestCountCheck(t *testing.T) {
	if err := limits.PushItems.Check("", limits.PushItems.Max); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	err := limits.PushItems.Check("", limits.PushItems.Max+1)
	if err == nil || !strings.HasPrefix(err.Error(), "items ") {
		t.Fatalf("past the bound: %v", err)
	}
}

// TestNumberPrintedLengthAgreesWithPostgreSQL: the length limits.JSON
// charges a number is the length jsonb prints it at, on numbers drawn with
// signs, zeros, fractions and exponents of every direction.
func TestNumberPrintedLengthAgreesWithPostgreSQL(t *testing.T) {
	pool := storetest.Pool(t)
	rapid.Check(t, func(t *rapid.T) {
		num := ""
		if rapid.Bool().Draw(t, "neg") {
			num = "-"
		}
		num += rapid.SampledFrom([]string{"0", "7", "10", "123", "9007199254740993"}).Draw(t, "int")
		if f := rapid.SampledFrom([]string{"", ".0", ".5", ".25", ".000", ".0301", ".9", ".099"}).Draw(t, "frac"); f != "" {
			num += f
		}
		if rapid.Bool().Draw(t, "hasExp") {
			num += rapid.SampledFrom([]string{"e", "E", "e+", "e-", "E-"}).Draw(t, "e") + strconv.Itoa(rapid.IntRange(0, 3000).Draw(t, "exp"))
		}
		got, why := limits.NumericPrinted(num)
		if why != "" {
			t.Fatalf("%s refused: %s", num, why)
		}
		var want int
		if err := pool.QueryRow(context.Background(), `SELECT length(($1::text)::jsonb::text)`, num).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: limits charges %d printed bytes, PostgreSQL prints %d", num, got, want)
		}
	})
}

// TestExpansionBoundIsInclusive: numbers growing by exactly
// MaxNumberExpansion when printed pass; one byte more is refused.
func TestExpansionBoundIsInclusive(t *testing.T) {
	// 1e131071 prints 131,072 digits from 8 bytes (131,064 more); 1e67
	// prints 68 from 4 (64 more): 8 x 131,064 + 64 = 1,048,576.
	at := "[" + strings.Repeat("1e131071,", 8) + "1e67]"
	if err := limits.JSON("payload", []byte(at)); err != nil {
		t.Fatalf("growing by exactly %d bytes: %v", limits.MaxNumberExpansion, err)
	}
	past := "[" + strings.Repeat("1e131071,", 8) + "1e68]"
	if err := limits.JSON("payload", []byte(past)); err == nil {
		t.Fatalf("growing by %d bytes was taken", limits.MaxNumberExpansion+1)
	}
}

// TestNumbersThatExpandPastTheBoundAreRefused: a few bytes of exponent
// notation that PostgreSQL would print as megabytes of digits are refused,
// naming the field; the same numbers under the bound pass, and PostgreSQL
// does store what is refused (only the broker's bound refuses it).
func TestNumbersThatExpandPastTheBoundAreRefused(t *testing.T) {
	pool := storetest.Pool(t)
	many := func(n int, num string) string { return "[" + strings.TrimSuffix(strings.Repeat(num+",", n), ",") + "]" }
	big := many(9, "1e131071") // 9 x 131,072 digits from 81 bytes: past 1 MiB
	if err := limits.JSON("payload", []byte(big)); err == nil || !strings.Contains(err.Error(), "payload") {
		t.Fatalf("9 x 1e131071: %v, want a refusal naming payload", err)
	}
	if !jsonbTakes(pool, big) {
		t.Fatal("PostgreSQL refuses the document itself; the test proves nothing")
	}
	if err := limits.JSON("payload", []byte(many(7, "1e131071"))); err != nil {
		t.Fatalf("7 x 1e131071 (under 1 MiB printed): %v", err)
	}
	if err := limits.JSON("payload", []byte(many(100, "-1e-16000"))); err == nil {
		t.Fatal("100 x -1e-16000, past the bound was taken")
	}
}
