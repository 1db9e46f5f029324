import Foundation
import Logging
import Systemd
import Testing

@Suite("libsystemd wrappers")
struct SystemdTests {
    @Test func journalFieldsCarryMetadataAsUpperCaseFields() {
        let fields = JournalLogHandler.fields(
            message: "token fetch failed",
            level: .warning,
            identifier: "fleet-tokend",
            label: "fleet-tokend.engine",
            metadata: ["token_kind": "vehicle", "token_id": "v-1", "provider_status": "HTTP 503"]
        )
        #expect(
            fields == [
                "MESSAGE=token fetch failed", "PRIORITY=4", "SYSLOG_IDENTIFIER=fleet-tokend",
                "LOGGER=fleet-tokend.engine",
                "PROVIDER_STATUS=HTTP 503", "TOKEN_ID=v-1", "TOKEN_KIND=vehicle",
            ]
        )
    }

    @Test func fieldNamesAreWhatTheJournalAccepts() {
        #expect(JournalLogHandler.fieldName("token_fingerprint") == "TOKEN_FINGERPRINT")
        #expect(JournalLogHandler.fieldName("sl-service") == "SL_SERVICE")
        #expect(JournalLogHandler.fieldName("_private") == "PRIVATE")
        #expect(JournalLogHandler.fieldName("1st") == "ST")
        #expect(JournalLogHandler.fieldName("é") == "")
        #expect(JournalLogHandler.priority(.critical) == 2)
        #expect(JournalLogHandler.priority(.debug) == 7)
    }

    @Test func sealedMemoryFileRoundTripsAndCannotBeWritten() throws {
        let bytes = Array("vehicle\tv-1\ttoken\t123\n".utf8)
        let fd = try SealedMemoryFile.create(name: "test-cache", bytes: bytes)
        defer { close(fd) }
        #expect(SealedMemoryFile.isSealed(fd))
        #expect(try SealedMemoryFile.read(fd) == bytes)
        #expect(write(fd, "x", 1) == -1, "sealed against writes")
    }

    @Test(
        .enabled(if: ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] == nil, "run under a service manager")
    )
    func notifierIsSilentWithoutANotifySocket() {
        let notifier = SystemdNotifier()
        #expect(!notifier.isEnabled)
        #expect(!notifier.store(fileDescriptor: 0, name: "cache"))
        notifier.ready(status: "ignored")
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment["LISTEN_FDS"] == nil, "run with sockets passed"))
    func noDescriptorsPassedOutsideSocketActivation() {
        #expect(ListenFileDescriptors.take().isEmpty)
    }
}
