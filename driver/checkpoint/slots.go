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

// The checkpoint file holds three regions of equal size: two slots ("A/B" or ping-pong slots)
// for the durable state and one intent region. Each region is a one-line text header followed by
// an encoded envelope (see Encode):
//
//	nn-ckpt-slot gen=<16 hex> len=<8 hex> crc=<8 hex>   (padded to headerSize, ends in '\n')
//	{"version":...,"bootID":...,"checksum":...,"data":{...}}
//
// In a slot, gen is the generation of the state; in the intent region (magic nn-ckpt-intn) it is
// the generation of the durable state the intent extends. len is the payload length, crc the
// CRC-32C of the header up to " crc=" and of the payload. The file is regions*slotSize bytes long,
// so the region size is known even when a header is torn.
//
// Invariants:
//   - A save overwrites only the slot that does not hold the newest valid state, in place, and
//     makes it durable with fdatasync. The file keeps its size and its blocks are allocated when
//     the file is created (filled and fsynced), so fdatasync has no metadata to commit: one data
//     flush per save, no journal commit, no rename, no directory entry.
//   - A reader takes the valid slot with the highest generation. A write torn by a crash or power
//     loss invalidates only the slot being written (its crc no longer matches), so a reader sees
//     either the previous or the new state, exactly like a rename-based replace.
//   - An intent is written in place without any sync. It counts only while its generation is the
//     newest slot's, so the next save retires it without touching it. A crash may lose or tear it
//     (then it is ignored); callers only record intents whose loss start-up recovery covers.
//   - The file is created or enlarged only through writeAtomic (temp file, fsync, rename), never in
//     place, so its size and allocation never change under an in-place write.
const (
	slotMagic   = "nn-ckpt-slot"
	intentMagic = "nn-ckpt-intn"
	// headerSize is the fixed size of a region header.
	headerSize = 64
	// minSlotSize holds about twenty prepared claims; bigger states enlarge the file.
	minSlotSize = 16 << 10
	// regions is the number of regions in the file; intentRegion is the index of the intent.
	regions      = 3
	intentRegion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errNoSlot marks a region that holds no valid state (never written, torn or corrupt).
var errNoSlot = errors.New("no valid state in region")

// regionHeader renders the header of a region holding payload at generation gen.
func regionHeader(magic string, gen uint64, payload []byte) []byte {
	prefix := fmt.Sprintf("%s gen=%016x len=%08x", magic, gen, len(payload))
	crc := crc32.Update(crc32.Checksum([]byte(prefix), castagnoli), castagnoli, payload)
	h := []byte(fmt.Sprintf("%s crc=%08x", prefix, crc))
	for len(h) < headerSize-1 {
		h = append(h, ' ')
	}
	return append(h, '\n')
}

// parseRegion validates one region (header and payload) and returns its generation and payload.
func parseRegion(magic string, region []byte) (uint64, []byte, error) {
	if len(region) < headerSize || !bytes.HasPrefix(region, []byte(magic+" ")) {
		return 0, nil, errNoSlot
	}
	hdr := string(region[:headerSize])
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
	if n > uint64(len(region)-headerSize) {
		return 0, nil, fmt.Errorf("%w: len %d exceeds the region", errNoSlot, n)
	}
	payload := region[headerSize : headerSize+int(n)]
	if got := crc32.Update(crc32.Checksum([]byte(hdr[:cut]), castagnoli), castagnoli, payload); uint64(got) != crc {
		return 0, nil, fmt.Errorf("%w: crc mismatch", errNoSlot)
	}
	return gen, payload, nil
}

// slotSizeFor returns the region size for a payload: a multiple of 4 KiB (the page size, so
// regions never share a page) with room for the payload twice over, and at least minSlotSize.
func slotSizeFor(payload int) int64 {
	need := int64(2 * (headerSize + payload))
	size := int64(minSlotSize)
	for size < need {
		size *= 2
	}
	return size
}

// newSlotFile renders a whole checkpoint file whose first slot holds payload at generation gen and
// whose other regions are empty. Unused bytes are spaces and each region ends in a newline, so the
// file stays readable text.
func newSlotFile(slotSize int64, gen uint64, payload []byte) []byte {
	buf := bytes.Repeat([]byte{' '}, int(regions*slotSize))
	for i := int64(1); i <= regions; i++ {
		buf[i*slotSize-1] = '\n'
	}
	copy(buf, regionHeader(slotMagic, gen, payload))
	copy(buf[headerSize:], payload)
	return buf
}

// isSlotFile reports whether raw is laid out as a slot file (as opposed to a bare envelope written
// by earlier versions of the driver): one of its slots starts with the slot magic.
func isSlotFile(raw []byte) bool {
	if len(raw)%regions != 0 {
		return false
	}
	size := len(raw) / regions
	for i := 0; i < 2; i++ {
		if bytes.HasPrefix(raw[i*size:], []byte(slotMagic)) {
			return true
		}
	}
	return false
}

// slotFile is the decoded content of a slot file.
type slotFile struct {
	newest int    // index of the newest valid slot
	gen    uint64 // its generation
	data   Data
	boot   string
	// intent is the decoded intent region when it extends generation gen, else nil.
	intent *Data
}

// readSlots decodes the newest valid slot of a whole slot file and the intent that extends it. It
// returns an error wrapping ErrCorrupt when neither slot is valid.
func readSlots(raw []byte) (slotFile, error) {
	if len(raw)%regions != 0 || len(raw) < regions*headerSize {
		return slotFile{}, fmt.Errorf("%w: slot file of %d bytes", ErrCorrupt, len(raw))
	}
	size := len(raw) / regions
	out := slotFile{newest: -1}
	var errs []error
	for i := 0; i < 2; i++ {
		gen, payload, err := parseRegion(slotMagic, raw[i*size:(i+1)*size])
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		if out.newest >= 0 && gen <= out.gen {
			continue
		}
		// The envelope's own checksum must hold too: a slot is only as good as its data.
		d, boot, err := Decode(payload)
		if err != nil {
			errs = append(errs, fmt.Errorf("slot %d: %w", i, err))
			continue
		}
		out.newest, out.gen, out.data, out.boot = i, gen, d, boot
	}
	if out.newest < 0 {
		return slotFile{}, fmt.Errorf("%w: no valid slot: %w", ErrCorrupt, errors.Join(errs...))
	}
	if gen, payload, err := parseRegion(intentMagic, raw[intentRegion*size:]); err == nil && gen == out.gen {
		if d, boot, err := Decode(payload); err == nil && boot == out.boot {
			out.intent = &d
		}
	}
	return out, nil
}

// regionWriter is writeRegion; tests replace it to inject write errors.
var regionWriter = writeRegion

// writeRegion overwrites region i of the file at path in place; with sync it makes the write
// durable with fdatasync. The file must have size regions*slotSize (checked, so a file another
// process replaced or enlarged is never written at a stale offset).
func writeRegion(path string, slotSize int64, i int, hdr, payload []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size() != regions*slotSize {
		return fmt.Errorf("%s: size %d, want %d: %w", path, st.Size(), regions*slotSize, errResized)
	}
	buf := make([]byte, 0, len(hdr)+len(payload))
	buf = append(append(buf, hdr...), payload...)
	if _, err := f.WriteAt(buf, int64(i)*slotSize); err != nil {
		return fmt.Errorf("write region %d of %s: %w", i, path, err)
	}
	if !sync {
		return nil
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("fdatasync %s: %w", path, err)
	}
	return nil
}

// errResized marks a checkpoint file whose size is not the one the store expects.
var errResized = errors.New("checkpoint file resized")
