import Foundation
import TestSupport
import Testing

/// libfleet-tokend-reader's check that a slot's token is servable (`is_servable_token`: eight
/// bytes at a time) against its rule read byte by byte: 1 to 16 KiB of bytes from 0x21 to 0x7E.
/// A small C program includes the library's source, so it calls the static function itself.
@Suite("The C reader's token check", .enabled(if: CReader.available, "needs a C compiler"))
struct CReaderTokenCheckTests {
    /// Every byte value at every place of tokens of 1 to 40 bytes (each place in a word and in
    /// the tail, words of every alignment: the token starts 0 to 7 bytes into an aligned buffer),
    /// and at the first, middle and last places of the longest token; then the lengths 0, the
    /// most (16 KiB) and one more, all bytes allowed.
    @Test func everyByteAtEveryPlaceIsJudgedAsByteByByte() async throws {
        let program = """
            #include "fleet_tokend_reader.c"

            static int by_the_rule(const char *token, size_t length) {
                if (length == 0 || length > FTS_MAX_TOKEN_LENGTH) return 0;
                for (size_t i = 0; i < length; i++)
                    if ((unsigned char)token[i] < 0x21 || (unsigned char)token[i] > 0x7E) return 0;
                return 1;
            }

            static uint64_t storage[(FTS_MAX_TOKEN_LENGTH + 16) / 8];

            static int check(const char *token, size_t length, long *checked) {
                ++*checked;
                if (is_servable_token(token, length) == by_the_rule(token, length)) return 1;
                printf("MISMATCH length %zu\\n", length);
                return 0;
            }

            int main(void) {
                char *base = (char *)storage;
                long checked = 0;
                for (size_t shift = 0; shift < 8; shift++) {
                    char *token = base + shift;
                    for (size_t length = 1; length <= 40; length++) {
                        memset(token, 'A' + (int)(length % 26), length);
                        if (!check(token, length, &checked)) return 1;
                        for (size_t place = 0; place < length; place++) {
                            char kept = token[place];
                            for (int byte = 0; byte < 256; byte++) {
                                token[place] = (char)byte;
                                if (!check(token, length, &checked)) {
                                    printf("byte 0x%02x at %zu, shift %zu\\n", byte, place, shift);
                                    return 1;
                                }
                            }
                            token[place] = kept;
                        }
                    }
                }
                size_t most = FTS_MAX_TOKEN_LENGTH;
                memset(base, '~', most + 1);
                size_t places[] = {0, 7, 8, most / 2, most - 8, most - 1};
                for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
                    for (int byte = 0; byte < 256; byte++) {
                        base[places[i]] = (char)byte;
                        if (!check(base, most, &checked)) {
                            printf("byte 0x%02x at %zu of the longest\\n", byte, places[i]);
                            return 1;
                        }
                    }
                    base[places[i]] = '~';
                }
                if (!check(base, 0, &checked) || !check(base, most, &checked) || !check(base, most + 1, &checked))
                    return 1;
                printf("checked %ld\\n", checked);
                return 0;
            }
            """
        let directory = TestTemporary.root + "/c-reader-token-check"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let source = directory + "/token_check.c"
        let binary = directory + "/token_check"
        try program.write(toFile: source, atomically: true, encoding: .utf8)
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../..").standardized.path
        let compiled = try await run(
            try #require(CReader.compiler),
            [
                "-O2", "-std=gnu11", "-Wall", "-Werror", "-Wno-unused-function",
                "-I", repository + "/Sources/CTokenSegment/include", "-I", repository + "/libfleet-tokend-reader",
                "-o", binary, source,
            ]
        )
        try #require(compiled.status == 0, "\(compiled.stderr)")
        let result = try await run(binary, [])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        // 8 shifts x (40 all-allowed tokens + 256 bytes at each of 820 places), 6 x 256 for the
        // longest, and the three lengths.
        let expected: Int = 8 * (40 + 256 * 820) + 6 * 256 + 3
        #expect(result.stdout == "checked \(expected)\n")
    }
}
