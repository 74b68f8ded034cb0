package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
)

// The checkpoint file holds two slots of equal size ("A/B" or ping-pong slots). Each slot is a
// one-line text header followed by an encoded envelope (see Encode):
//
//	nn-ckpt-slot gen=<16 hex> len=<8 hex> crc=<8 hex>   (padded to headerSize, ends in '\n')
//	{"version":...,"bootID":...,"checksum":...,"data":{...}}
//
// gen is a generation counter, len the payload length, crc the CRC-32C of the header up to
// " crc=" and of the payload. The file is 2*slotSize bytes long, so the slot size is known even
// when a header is torn.
//
// Invariants:
//   - A save overwrites only the slot that does not hold the newest valid state, in place, and
//     makes it durable with fdatasync. The file keeps its size and its blocks are allocated when
//     the file is created (filled and fsynced), so fdatasync has no metadata to commit: one data
//     flush per save, no journal commit, no rename, no directory entry.
//   - A reader takes the valid slot with the highest generation. A write torn by a crash or power
//     loss invalidates only the slot being written (its crc no longer matches), so a reader sees
//     either the previous or the new state, exactly like a rename-based replace.
//   - The file is created or enlarged only through writeAtomic (temp file, fsync, rename), never in
//     place, so its size and allocation never change under an in-place write.
const (
	slotMagic = "nn-ckpt-slot"
	// headerSize is the fixed size of a slot header.
	headerSize = 64
	// minSlotSize holds about twenty prepared claims; bigger states enlarge the file.
	minSlotSize = 16 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errNoSlot marks a slot that holds no valid state (never written, torn or corrupt).
var errNoSlot = errors.New("no valid state in slot")

// slotHeader renders the header of a slot holding payload at generation gen.
func slotHeader(gen uint64, payload []byte) []byte {
	prefix := fmt.Sprintf("%s gen=%016x len=%08x", slotMagic, gen, len(payload))
	crc := crc32.Update(crc32.Checksum([]byte(prefix), castagnoli), castagnoli, payload)
	h := []byte(fmt.Sprintf("%s crc=%08x", prefix, crc))
	for len(h) < headerSize-1 {
		h = append(h, ' ')
	}
	return append(h, '\n')
}

// parseSlot validates one slot (header and payload) and returns its generation and payload.
func parseSlot(slot []byte) (uint64, []byte, error) {
	if len(slot) < headerSize || !bytes.HasPrefix(slot, []byte(slotMagic+" ")) {
		return 0, nil, errNoSlot
	}
	hdr := string(slot[:headerSize])
	cut := strings.Index(hdr, " crc=")
	fields := strings.Fields(hdr)
	if cut < 0 || len(fields) != 4 {
		return 0, nil, fmt.Errorf("%w: header %q", errNoSlot, strings.TrimSpace(hdr))
	}
	num := func(field, key string, bits int) (uint64, error) {
		v, ok := strings.CutPrefix(field, key+"=")
		if !ok {
			return 0, fmt.Errorf("%w: header field %q, want %s=", errNoSlot, field, key)
		}
		n, err := strconv.ParseUint(v, 16, bits)
		if err != nil {
			return 0, fmt.Errorf("%w: header field %s: %w", errNoSlot, key, err)
		}
		return n, nil
	}
	gen, err := num(fields[1], "gen", 64)
	if err != nil {
		return 0, nil, err
	}
	n, err := num(fields[2], "len", 32)
	if err != nil {
		return 0, nil, err
	}
	crc, err := num(fields[3], "crc", 32)
	if err != nil {
		return 0, nil, err
	}
	if n > uint64(len(slot)-headerSize) {
		return 0, nil, fmt.Errorf("%w: len %d exceeds the slot", errNoSlot, n)
	}
	payload := slot[headerSize : headerSize+int(n)]
	if got := crc32.Update(crc32.Checksum([]byte(hdr[:cut]), castagnoli), castagnoli, payload); uint64(got) != crc {
		return 0, nil, fmt.Errorf("%w: crc mismatch", errNoSlot)
	}
	return gen, payload, nil
}

// slotSizeFor returns the slot size for a payload: a multiple of 4 KiB (the page size, so slots
// never share a page) with room for the payload twice over, and at least minSlotSize.
func slotSizeFor(payload int) int64 {
	need := int64(2 * (headerSize + payload))
	size := int64(minSlotSize)
	for size < need {
		size *= 2
	}
	return size
}

// newSlotFile renders a whole checkpoint file whose first slot holds payload at generation gen and
// whose second slot is empty. Unused bytes are spaces and each slot ends in a newline, so the file
// stays readable text.
func newSlotFile(slotSize int64, gen uint64, payload []byte) []byte {
	buf := bytes.Repeat([]byte{' '}, int(2*slotSize))
	buf[slotSize-1], buf[2*slotSize-1] = '\n', '\n'
	copy(buf, slotHeader(gen, payload))
	copy(buf[headerSize:], payload)
	return buf
}

// isSlotFile reports whether raw starts like a slot file (as opposed to a bare envelope written by
// earlier versions of the driver).
func isSlotFile(raw []byte) bool { return bytes.HasPrefix(raw, []byte(slotMagic)) }

// readSlots decodes the newest valid slot of a whole slot file. It returns the slot index, its
// generation, the decoded data and boot id, or an error wrapping ErrCorrupt when neither slot is
// valid.
func readSlots(raw []byte) (int, uint64, Data, string, error) {
	if len(raw)%2 != 0 || len(raw) < 2*headerSize {
		return 0, 0, Data{}, "", fmt.Errorf("%w: slot file of %d bytes", ErrCorrupt, len(raw))
	}
	size := len(raw) / 2
	best, bestGen := -1, uint64(0)
	var bestData Data
	var bestBoot string
	var errs []error
	for i := 0; i < 2; i++ {
		gen, payload, err := parseSlot(raw[i*size : (i+1)*size])
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		if best >= 0 && gen <= bestGen {
			continue
		}
		// The envelope's own checksum must hold too: a slot is only as good as its data.
		d, boot, err := Decode(payload)
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		best, bestGen, bestData, bestBoot = i, gen, d, boot
	}
	if best < 0 {
		return 0, 0, Data{}, "", fmt.Errorf("%w: no valid slot: %w", ErrCorrupt, errors.Join(errs...))
	}
	return best, bestGen, bestData, bestBoot, nil
}

// writeSlot overwrites slot i of the file at path in place and makes it durable with fdatasync.
// The file must have size 2*slotSize (checked, so a file another process replaced or enlarged is
// never written at a stale offset).
func writeSlot(path string, slotSize int64, i int, hdr, payload []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() != 2*slotSize {
		return fmt.Errorf("%s: size %d, want %d: %w", path, st.Size(), 2*slotSize, errResized)
	}
	buf := make([]byte, 0, len(hdr)+len(payload))
	buf = append(append(buf, hdr...), payload...)
	if _, err := f.WriteAt(buf, int64(i)*slotSize); err != nil {
		return fmt.Errorf("write slot %d of %s: %w", i, path, err)
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("fdatasync %s: %w", path, err)
	}
	return nil
}

// errResized marks a checkpoint file whose size is not the one the store expects.
var errResized = errors.New("checkpoint file resized")
