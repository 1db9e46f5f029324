/// Every request a run can send, built once before the run and laid out back to back.
///
/// Request `j` asks for key `j % keys`, for `j` in `0..<keys + depth`. A connection walks the keys
/// in order from its own starting point and never has more than `depth` requests to write, so the
/// bytes of its next requests are always one contiguous range, `offsets[i]..<offsets[i + n]`.
/// Threads only read it.
final class RequestBook {
    let keys: Int
    let bytes: UnsafeMutablePointer<UInt8>
    /// `offsets[j]` is where request `j` starts; `offsets[keys + depth]` is the end.
    let offsets: UnsafeMutablePointer<Int>
    let byteCount: Int

    init(options: Options) {
        keys = options.keys
        let count = options.keys + options.depth
        var value: [UInt8] = []
        if options.setBytes > 0 {
            // Printable, space-free filler in the alphabet of a JWT, so an inline SET takes it whole.
            let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
            value = (0..<options.setBytes).map { alphabet[$0 % alphabet.count] }
        }
        var all: [UInt8] = []
        all.reserveCapacity(count * (32 + options.kind.utf8.count + value.count))
        let offsets = UnsafeMutablePointer<Int>.allocate(capacity: count + 1)
        for request in 0..<count {
            offsets[request] = all.count
            let key = "bench-\(options.firstKey + request % options.keys)"
            switch options.wire {
            case .agent:
                all += Array("GET \(options.kind) \(key)\n".utf8)
            case .redis where options.setBytes > 0:
                all += Array("SET \(key) ".utf8)
                all += value
                all += Array("\r\n".utf8)
            case .redis:
                all += Array("GET \(key)\r\n".utf8)
            }
        }
        offsets[count] = all.count
        self.offsets = offsets
        byteCount = all.count
        bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: max(all.count, 1))
        all.withUnsafeBufferPointer { bytes.initialize(from: $0.baseAddress!, count: $0.count) }
    }

    deinit {
        bytes.deallocate()
        offsets.deallocate()
    }
}
