package scenarios

// Rows is how many rows the generator's matrix plan has. A generated
// seed's low bits name its row; a set of Rows seeds whose low bits run
// through 0..Rows-1 (WithRow, as make sim's 16 seeds do) runs every row.
const Rows = 16

// WithRow puts row i%Rows into seed's low bits.
func WithRow(seed uint64, i int) uint64 { return seed&^uint64(Rows-1) | uint64(i%Rows) }

// rowOf is the matrix row a seed's low bits name.
func rowOf(seed uint64) int { return int(seed & (Rows - 1)) }
