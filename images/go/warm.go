// Built once when the image is made, so that the standard-library packages programs
// commonly import are already compiled in /opt/go-cache (see go-build).
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"container/list"
	"container/ring"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"math/bits"
	"math/cmplx"
	"math/rand"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

var (
	_ = bufio.NewReader
	_ = bytes.NewBuffer
	_ = cmp.Compare[int]
	_ = heap.Init
	_ = list.New
	_ = ring.New
	_ = binary.BigEndian
	_ = json.Marshal
	_ = errors.New
	_ = io.EOF
	_ = maps.Keys[map[int]int]
	_ = math.Sqrt
	_ = big.NewInt
	_ = bits.OnesCount
	_ = cmplx.Abs
	_ = rand.Intn
	_ = regexp.MustCompile
	_ = slices.Sort[[]int]
	_ = sort.Ints
	_ = strconv.Itoa
	_ = strings.Split
	_ = sync.Mutex{}
	_ = atomic.AddInt64
	_ = time.Now
	_ = unicode.IsDigit
	_ = utf8.RuneLen
)

func main() { fmt.Fprintln(os.Stdout, "warm") }
