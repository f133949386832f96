package pgcat

import (
	"os"
	"testing"

	"github.com/tidemark/cdc/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
