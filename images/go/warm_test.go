// Built once when the image is made, so that `testing` and testify are already compiled in
// /opt/go-cache for the go_test language (see go-test).
package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWarm(t *testing.T) {
	assert.Equal(t, 1, 1)
	require.True(t, true)
}
