package sim

import (
	"context"
	"errors"
	"io"
)

func runFree(ctx context.Context, dsn string, o Options, log io.Writer) (*Result, error) {
	return nil, errors.New("free-running mode: not yet")
}
