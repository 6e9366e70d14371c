package plan

// SetChunkSize sets the size of the chunks Chunks are made of (tests make
// small plans span several) and returns what sets it back.
func SetChunkSize(n int) func() {
	was := chunkSize
	chunkSize = n
	return func() { chunkSize = was }
}
