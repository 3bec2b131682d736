package tables

import (
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
	"slices"
	"sync"
)

// inflater unpacks a DEFLATE stream (RFC 1951), the compression of a workbook's parts.
// Unpacking was half of reading a workbook with the usual decoders, which take the
// input a byte at a time into a 32-bit buffer and a window of 32 KiB: this one takes it
// eight bytes at a time into a 64-bit buffer, which then holds a length, a distance
// and their extra bits, reads each symbol with one table lookup (two for rare long
// codes), and copies matches whole (eight bytes at a time when they overlap) into a
// window that holds 256 KiB of output past the 32 KiB it refers back to: about 1.4
// times klauspost/compress's speed on a sheet's XML. It accepts exactly the streams
// compress/flate accepts and gives the same bytes (tests hold it to that); a stream
// that is not DEFLATE ends in an error, never in a panic. It is given to archive/zip,
// which checks each part's size and checksum.
type inflater struct {
	r        io.Reader
	in       []byte
	ip, iend int   // unread input: in[ip:iend]
	rerr     error // r's error, once its bytes are in in
	bits     uint64
	nb       uint // bits holds nb bits of input, those before in[ip]; above them may be those of in[ip:]

	out    []byte // the window: what was unpacked, the last 32 KiB of it kept in front
	op, rd int    // out[:op] is unpacked, of which out[rd:op] is not yet read

	state  inflateState
	final  bool // the block is the stream's last
	stored int  // what a stored block holds still
	err    error

	lit, dist       []uint32 // the block's codes (decoding tables, below)
	dynLit, dynDist []uint32 // a dynamic block's, reused
	lens            [maxLitCodes + maxDistCodes]uint8
}

type inflateState uint8

const (
	blockHeader inflateState = iota
	huffmanBlock
	storedBlock
	streamEnd
)

const (
	windowBytes  = 32 << 10 // how far back a match refers
	maxMatch     = 258
	inflateSlack = maxMatch + 8 // past the window's end: a match copied 8 bytes at a time
	// inflateOutBytes are unpacked between moves of the window; inflateInBytes are
	// read at a time.
	inflateOutBytes = 256 << 10
	inflateInBytes  = 64 << 10

	maxLitCodes  = 286
	maxDistCodes = 30
	maxCodeBits  = 15
	litBits      = 10 // bits of a code looked up at once: longer codes take a second lookup
	distBits     = 8
)

// A decoding table is indexed by the next bits of input (in DEFLATE's order, the
// first at the bottom) and gives what the code they start with stands for, packed in
// a uint32: its length in bits (0 for no code: the input is corrupt), what it is, the
// count of extra bits that follow it, and its value (a literal byte, a length's or a
// distance's base). A code longer than the table's bits has an entry that points to a
// second table, indexed by the bits after those.
const (
	entLiteral = iota << 4
	entLength
	entEnd
	entDist
	entSub

	entKind = 15 << 4
)

func entry(codeBits uint, kind uint32, extra uint, value uint32) uint32 {
	return uint32(codeBits) | kind | uint32(extra)<<8 | value<<16
}

// The lengths and distances codes 257-285 and 0-29 stand for: a base and extra bits.
var (
	lengthBase  = [29]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
)

// The fixed codes of RFC 1951 3.2.6.
var (
	fixedOnce           sync.Once
	fixedLit, fixedDist []uint32
)

func fixedTables() ([]uint32, []uint32) {
	fixedOnce.Do(func() {
		var lens [288 + 32]uint8
		for i := range 288 {
			switch {
			case i < 144:
				lens[i] = 8
			case i < 256:
				lens[i] = 9
			case i < 280:
				lens[i] = 7
			default:
				lens[i] = 8
			}
		}
		for i := range 32 {
			lens[288+i] = 5
		}
		var ok bool
		if fixedLit, ok = buildTable(nil, lens[:288], litBits, litEntry); !ok {
			panic("inflate: the fixed literal code")
		}
		if fixedDist, ok = buildTable(nil, lens[288:], distBits, distEntry); !ok {
			panic("inflate: the fixed distance code")
		}
	})
	return fixedLit, fixedDist
}

func litEntry(sym int, codeBits uint) uint32 {
	switch {
	case sym < 256:
		return entry(codeBits, entLiteral, 0, uint32(sym))
	case sym == 256:
		return entry(codeBits, entEnd, 0, 0)
	case sym < 257+len(lengthBase):
		return entry(codeBits, entLength, uint(lengthExtra[sym-257]), lengthBase[sym-257])
	}
	return 0 // 286 and 287 of the fixed code stand for nothing
}

func distEntry(sym int, codeBits uint) uint32 {
	if sym < len(distBase) {
		return entry(codeBits, entDist, uint(distExtra[sym]), distBase[sym])
	}
	return 0 // 30 and 31 of the fixed code stand for nothing
}

// buildTable builds into t the decoding table of the canonical code of lens (each
// symbol's code length, 0 for none), looked up tableBits at a time; false when lens
// make no code: more codes than their lengths allow, or fewer but for the single code
// of one bit zlib writes (compress/flate's rule). An empty code is a table whose every
// lookup fails.
func buildTable(t []uint32, lens []uint8, tableBits uint, ent func(sym int, codeBits uint) uint32) ([]uint32, bool) {
	var count [maxCodeBits + 1]int
	maxLen := uint(0)
	for _, l := range lens {
		count[l]++
		maxLen = max(maxLen, uint(l))
	}
	count[0] = 0
	var next [maxCodeBits + 2]int
	code := 0
	for l := 1; l <= maxCodeBits; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	if maxLen > 0 {
		if total := next[maxLen] + count[maxLen]; total != 1<<maxLen && !(total == 1 && maxLen == 1) {
			return t, false
		}
	}
	size := 1 << tableBits
	t = slices.Grow(t[:0], size)[:size]
	clear(t)
	subBits := uint(0)
	if maxLen > tableBits {
		subBits = maxLen - tableBits
	}
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		n := uint(l)
		rev := int(bits.Reverse16(uint16(next[n])) >> (16 - n))
		next[n]++
		e := ent(sym, n)
		if n <= tableBits {
			for i := rev; i < size; i += 1 << n {
				t[i] = e
			}
			continue
		}
		prefix := rev & (size - 1)
		if t[prefix] == 0 {
			t[prefix] = entry(tableBits, entSub, subBits, uint32(len(t)))
			at := len(t)
			t = slices.Grow(t, 1<<subBits)[:at+1<<subBits]
			clear(t[at:])
		}
		sub := int(t[prefix] >> 16)
		for i := rev >> tableBits; i < 1<<subBits; i += 1 << (n - tableBits) {
			t[sub+i] = e
		}
	}
	return t, true
}

func newInflater(r io.Reader) *inflater {
	return &inflater{r: r, in: make([]byte, inflateInBytes), out: make([]byte, windowBytes+inflateOutBytes+inflateSlack)}
}

var (
	errCorrupt        = errors.New("the compressed data is corrupt")
	errDistanceTooFar = errors.New("the compressed data refers back past its start")
)

// Read gives what was unpacked next.
func (f *inflater) Read(p []byte) (int, error) {
	for {
		if f.rd < f.op {
			n := copy(p, f.out[f.rd:f.op])
			f.rd += n
			return n, nil
		}
		if f.err != nil {
			return 0, f.err
		}
		if f.op >= len(f.out)-inflateSlack-maxMatch && f.op > windowBytes {
			// All was read: keep the window, and unpack after it.
			f.op = copy(f.out, f.out[f.op-windowBytes:f.op])
			f.rd = f.op
		}
		f.step()
	}
}

func (f *inflater) Close() error { return nil }

// step unpacks until the window is full, or a block ends, or an error.
func (f *inflater) step() {
	switch f.state {
	case blockHeader:
		if f.final {
			f.state, f.err = streamEnd, io.EOF
			return
		}
		f.header()
	case huffmanBlock:
		f.huffman()
	case storedBlock:
		f.copyStored()
	case streamEnd:
		f.err = io.EOF
	}
}

// more reads more input after what is left; false at its end (f.rerr says why).
func (f *inflater) more() bool {
	if f.rerr != nil {
		return false
	}
	if f.ip > 0 {
		f.iend = copy(f.in, f.in[f.ip:f.iend])
		f.ip = 0
	}
	start := f.iend
	for range 100 {
		n, err := f.r.Read(f.in[f.iend:])
		f.iend += n
		if err != nil {
			f.rerr = err
			break
		}
		if f.iend-start > 0 {
			break
		}
	}
	if f.iend == start && f.rerr == nil {
		f.rerr = io.ErrNoProgress
	}
	return f.iend > start
}

// fill adds input to the bit buffer a byte at a time, to more than 56 bits or to the
// input's end.
func (f *inflater) fill() {
	for f.nb <= 56 && (f.ip < f.iend || f.more()) {
		f.bits |= uint64(f.in[f.ip]) << f.nb
		f.ip++
		f.nb += 8
	}
}

// need makes the bit buffer hold at least n bits (at most 56); false at the input's
// end, with f.err set.
func (f *inflater) need(n uint) bool {
	if f.nb < n {
		f.fill()
	}
	if f.nb < n {
		f.fail(nil)
		return false
	}
	return true
}

// take takes n bits (need(n) first).
func (f *inflater) take(n uint) uint32 {
	v := uint32(f.bits & (1<<n - 1))
	f.bits >>= n
	f.nb -= n
	return v
}

// fail ends the stream: with err, or when nil, as the input ends too soon (or with
// r's error).
func (f *inflater) fail(err error) {
	if err == nil {
		err = io.ErrUnexpectedEOF
		if f.rerr != nil && f.rerr != io.EOF {
			err = f.rerr
		}
	}
	f.state, f.err = streamEnd, err
}

// header reads a block's header, and a dynamic block's codes.
func (f *inflater) header() {
	if !f.need(3) {
		return
	}
	f.final = f.take(1) == 1
	switch f.take(2) {
	case 0:
		// Stored: LEN and NLEN from the next byte on.
		f.take(f.nb & 7)
		if !f.need(32) {
			return
		}
		n, notN := f.take(16), f.take(16)
		if n != ^notN&0xffff {
			f.fail(errCorrupt)
			return
		}
		f.stored, f.state = int(n), storedBlock
	case 1:
		f.lit, f.dist = fixedTables()
		f.state = huffmanBlock
	case 2:
		if f.dynamicCodes() {
			f.lit, f.dist, f.state = f.dynLit, f.dynDist, huffmanBlock
		}
	default:
		f.fail(errCorrupt)
	}
}

// codeOrder is the order of the code length code's lengths in a dynamic header.
var codeOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// dynamicCodes reads a dynamic block's codes (RFC 1951 3.2.7) into f.dynLit and
// f.dynDist; false with f.err set when they are no codes.
func (f *inflater) dynamicCodes() bool {
	if !f.need(14) {
		return false
	}
	nlit, ndist, nclen := int(f.take(5))+257, int(f.take(5))+1, int(f.take(4))+4
	if nlit > maxLitCodes || ndist > maxDistCodes {
		f.fail(errCorrupt)
		return false
	}
	var clens [19]uint8
	for _, i := range codeOrder[:nclen] {
		if !f.need(3) {
			return false
		}
		clens[i] = uint8(f.take(3))
	}
	var clTable [1 << 7]uint32
	ct, ok := buildTable(clTable[:0], clens[:], 7, func(sym int, codeBits uint) uint32 {
		return entry(codeBits, entLiteral, 0, uint32(sym))
	})
	if !ok {
		f.fail(errCorrupt)
		return false
	}
	lens := f.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		// A code of the code length code is at most 7 bits, its extra bits at most 7.
		if f.nb < 14 {
			f.fill()
		}
		e := ct[f.bits&(1<<7-1)]
		n := uint(e & 15)
		if n == 0 || n > f.nb {
			f.fail(errCorrupt)
			if n != 0 {
				f.fail(nil)
			}
			return false
		}
		f.take(n)
		sym := e >> 16
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep uint32
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				f.fail(errCorrupt)
				return false
			}
			if !f.need(2) {
				return false
			}
			rep, val = 3+f.take(2), lens[i-1]
		case 17:
			if !f.need(3) {
				return false
			}
			rep = 3 + f.take(3)
		default:
			if !f.need(7) {
				return false
			}
			rep = 11 + f.take(7)
		}
		if i+int(rep) > len(lens) {
			f.fail(errCorrupt)
			return false
		}
		for range rep {
			lens[i] = val
			i++
		}
	}
	if lens[256] == 0 { // no end of block
		f.fail(errCorrupt)
		return false
	}
	if f.dynLit, ok = buildTable(f.dynLit, lens[:nlit], litBits, litEntry); !ok {
		f.fail(errCorrupt)
		return false
	}
	if f.dynDist, ok = buildTable(f.dynDist, lens[nlit:], distBits, distEntry); !ok {
		f.fail(errCorrupt)
		return false
	}
	return true
}

// copyStored copies a stored block's bytes until its end or the window's: first those
// in the bit buffer, then from the input.
func (f *inflater) copyStored() {
	limit := len(f.out) - inflateSlack
	for f.stored > 0 && f.op < limit && f.nb >= 8 {
		f.out[f.op] = byte(f.take(8))
		f.op++
		f.stored--
	}
	if f.nb < 8 {
		f.bits, f.nb = 0, 0 // what it held past nb are the bytes copied below
	}
	for f.stored > 0 && f.op < limit {
		if f.ip == f.iend && !f.more() {
			f.fail(nil)
			return
		}
		n := copy(f.out[f.op:limit], f.in[f.ip:min(f.iend, f.ip+f.stored)])
		f.op += n
		f.ip += n
		f.stored -= n
	}
	if f.stored == 0 {
		f.state = blockHeader
	}
}

// huffman unpacks a compressed block's symbols until its end or the window's. The
// bit buffer is filled eight bytes at a time while eight are left in the input, to 56
// bits or more: the 48 a length and a distance take at most, with their extra bits.
func (f *inflater) huffman() {
	bitbuf, nb := f.bits, f.nb
	in, ip := f.in[:f.iend], f.ip
	out, op := f.out, f.op
	lit, dist := f.lit, f.dist
	limit := len(out) - inflateSlack - maxMatch
	defer func() {
		f.bits, f.nb, f.ip, f.op = bitbuf, nb, ip, op
	}()
	for op < limit {
		if nb < 48 {
			if len(in)-ip >= 8 {
				bitbuf |= binary.LittleEndian.Uint64(in[ip:]) << nb
				ip += int((63 - nb) >> 3)
				nb |= 56
			} else {
				f.bits, f.nb, f.ip = bitbuf, nb, ip
				f.fill() // fewer at the input's end: the symbols' checks below tell
				bitbuf, nb, ip, in = f.bits, f.nb, f.ip, f.in[:f.iend]
			}
		}
		e := lit[bitbuf&(1<<litBits-1)]
		if e&entKind == entSub {
			e = lit[e>>16+uint32(bitbuf>>litBits)&(1<<(e>>8&15)-1)]
		}
		n := uint(e & 15)
		if n == 0 || n > nb {
			f.brokenCode(n)
			return
		}
		bitbuf >>= n
		nb -= n
		switch e & entKind {
		case entLiteral:
			out[op] = byte(e >> 16)
			op++
			continue
		case entEnd:
			f.state = blockHeader
			return
		}
		extra := uint(e >> 8 & 15)
		if extra > nb {
			f.brokenCode(1)
			return
		}
		length := int(e>>16) + int(bitbuf&(1<<extra-1))
		bitbuf >>= extra
		nb -= extra

		d := dist[bitbuf&(1<<distBits-1)]
		if d&entKind == entSub {
			d = dist[d>>16+uint32(bitbuf>>distBits)&(1<<(d>>8&15)-1)]
		}
		n = uint(d & 15)
		extra = uint(d >> 8 & 15)
		if n == 0 || n+extra > nb {
			f.brokenCode(n)
			return
		}
		bitbuf >>= n
		distance := int(d>>16) + int(bitbuf&(1<<extra-1))
		bitbuf >>= extra
		nb -= n + extra
		if distance > op {
			f.fail(errDistanceTooFar)
			return
		}
		from := op - distance
		switch {
		case distance >= length:
			copy(out[op:op+length], out[from:])
		case distance >= 8:
			// Overlapping: eight bytes at a time, into the slack past the window's
			// end, each word's bytes written before they are read.
			for i := 0; i < length; i += 8 {
				binary.LittleEndian.PutUint64(out[op+i:], binary.LittleEndian.Uint64(out[from+i:]))
			}
		case distance == 1:
			b := out[from]
			for i := op; i < op+length; i++ {
				out[i] = b
			}
		default:
			for i := range length {
				out[op+i] = out[from+i]
			}
		}
		op += length
	}
}

// brokenCode ends the stream at a code of n bits that is none (n is 0) or that the
// input ends within.
func (f *inflater) brokenCode(n uint) {
	if n == 0 {
		f.fail(errCorrupt)
		return
	}
	f.fail(nil)
}
