package names_test

import (
	"testing"

	"github.com/queen-go/queen/queen/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }
