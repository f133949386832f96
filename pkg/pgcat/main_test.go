package pgcat

import (
	"os"
	"testing"

	"github.com/tidemark/cdc/integration/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
