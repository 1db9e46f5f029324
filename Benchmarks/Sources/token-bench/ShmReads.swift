import FleetTokenClient
import Foundation

/// `token-bench shm-reads`: a fixed number of the default client's reads of cached tokens from the
/// agent's shared-memory segment, untimed, for callgrind to count (Benchmarks/callgrind.sh runs it
/// at two counts and divides the difference of their instructions by the difference of the counts,
/// which cancels the start-up; method in docs/BENCHMARKS-METHOD.md, "instructions per
/// shared-memory read").
///
/// Options: `--socket PATH` (a running agent that holds the keys), `--reads N` [100000],
/// `--keys K` [64, a power of two], `--prefix P` [bench-]: the keys `vehicle <P>0` … `<P><K-1>`,
/// made once as a worker holds its ids, read in turn. Each key is read once before the counted
/// loop (the segment is asked for and mapped then), and every counted read must come from shared
/// memory (`sharedMemoryReads`). Prints one JSON object: reads, those from shared memory, and the
/// last token's length.
struct ShmReads {
    let option: (String, String) -> String

    func run() async throws {
        let socket = option("--socket", "")
        let reads = Int(option("--reads", "100000")) ?? -1
        let keys = Int(option("--keys", "64")) ?? 0
        let prefix = option("--prefix", "bench-")
        guard !socket.isEmpty, reads >= 0, keys > 0, keys & (keys - 1) == 0 else {
            throw BenchError("shm-reads --socket PATH [--reads N] [--keys K, a power of two] [--prefix P]")
        }
        let client = FleetTokenClient(socketPath: socket)
        let subjects = (0..<keys).map { TokenSubject.vehicle("\(prefix)\($0)") }
        for subject in subjects { _ = try await client.token(subject) }
        let before = client.sharedMemoryReads
        let length = try await Self.read(client, subjects, reads)
        let fromMemory = client.sharedMemoryReads - before
        print("{\"reads\": \(reads), \"shared_memory_reads\": \(fromMemory), \"token_bytes\": \(length)}")
        guard fromMemory == reads else {
            throw BenchError("\(reads - fromMemory) of \(reads) reads did not come from shared memory")
        }
    }

    /// The counted loop: `reads` calls of `client.token`, the keys in turn. Returns the last
    /// token's length (so that no read can be left out).
    @inline(never)
    static func read(_ client: FleetTokenClient, _ subjects: [TokenSubject], _ reads: Int) async throws -> Int {
        let mask = subjects.count - 1
        var length = 0
        for index in 0..<reads {
            length = try await client.token(subjects[index & mask]).jwt.utf8.count
        }
        return length
    }
}
