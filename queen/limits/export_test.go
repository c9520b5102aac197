package limits

// NumericPrinted exposes numericRange's printed length to the tests.
func NumericPrinted(num string) (int, string) { return numericRange([]byte(num)) }
