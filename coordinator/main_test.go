package coordinator_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has an owner that stops it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
