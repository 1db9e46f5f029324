import NIOCore
import Testing

@testable import TokenAgentServer

/// The `STATS` line as bytes: fields, per-kind fields and decimals of every sign and size.
@Suite("STATS line")
struct StatsLineTests {
    @Test func writesFieldsAndDecimalsOfEverySize() {
        var line = StatsLine()
        line.add("zero", 0)
        line.add("skew_s", -42)
        line.add("most", Int.max)
        line.add("least", Int.min)
        line.add("signs_", kind: "vehicle-2", 7)
        line.add("shm", text: "off")
        var output = ByteBuffer(string: "before\n")
        line.write(to: &output)
        #expect(
            String(buffer: output)
                == "before\nOK zero=0 skew_s=-42 most=\(Int.max) least=\(Int.min) signs_vehicle-2=7 shm=off\n"
        )
    }
}
