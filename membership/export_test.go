package membership

// MetaCodecForBench encodes and decodes m, returning the encoded size.
func MetaCodecForBench(m Meta) (int, Meta) {
	enc, err := m.encode()
	if err != nil {
		panic(err)
	}
	out, err := decodeMeta(enc)
	if err != nil {
		panic(err)
	}
	return len(enc), out
}
