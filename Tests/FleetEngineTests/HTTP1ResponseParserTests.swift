import NIOCore
import Testing

@testable import Egress

/// The HTTP/1.1 answer reader on wire bytes as servers send them (RFC 9112's framings), fed
/// whole and split at every byte.
struct HTTP1ResponseParserTests {
    struct Answer: Equatable {
        var status: Int?
        var retryAfter: String?
        var keepAlive: Bool?
        var body = ""
        var ended = false
        var leftover = false
    }

    /// Feeds `pieces` one after another and collects what the parser reported.
    func read(_ pieces: [String]) throws -> (Answer, HTTP1ResponseParser) {
        var parser = HTTP1ResponseParser()
        var answer = Answer()
        for piece in pieces {
            var bytes = ByteBuffer(string: piece)
            for event in try parser.feed(&bytes) {
                switch event {
                case .head(let status, let retryAfter, let keepAlive):
                    answer.status = status
                    answer.retryAfter = retryAfter
                    answer.keepAlive = keepAlive
                case .body(let body):
                    answer.body += String(buffer: body)
                case .end(let leftover):
                    answer.ended = true
                    answer.leftover = leftover
                }
            }
        }
        return (answer, parser)
    }

    /// The same answer from the whole text and from every split into two pieces.
    func readEverySplit(_ wire: String) throws -> Answer {
        let (whole, _) = try read([wire])
        let bytes = Array(wire.utf8)
        for split in 1..<bytes.count {
            let (pieces, _) = try read([String(decoding: bytes[..<split], as: UTF8.self),
                                        String(decoding: bytes[split...], as: UTF8.self)])
            #expect(pieces == whole, "split at byte \(split)")
        }
        let (byteByByte, _) = try read(bytes.map { String(decoding: [$0], as: UTF8.self) })
        #expect(byteByByte == whole)
        return whole
    }

    @Test func contentLength() throws {
        let answer = try readEverySplit(
            "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nretry-after:  7 \r\nContent-Length: 13\r\n\r\n{\"error\":429}")
        #expect(answer == Answer(status: 429, retryAfter: "7", keepAlive: true, body: "{\"error\":429}", ended: true))
    }

    @Test func chunkedWithExtensionsAndTrailers() throws {
        let answer = try readEverySplit(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4;name=value\r\n{\"a\"\r\nA\r\n:1234567}\n\r\n0\r\nX-Trailer: yes\r\n\r\n")
        #expect(answer == Answer(status: 200, retryAfter: nil, keepAlive: true, body: "{\"a\":1234567}\n", ended: true))
    }

    @Test func informationalAnswersAreSkipped() throws {
        let answer = try readEverySplit(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        #expect(answer == Answer(status: 200, retryAfter: nil, keepAlive: true, body: "{}", ended: true))
    }

    @Test func connectionHeaderAndVersionDecideKeepAlive() throws {
        #expect(try read(["HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n"]).0.keepAlive == false)
        #expect(try read(["HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"]).0.keepAlive == false)
        #expect(try read(["HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"]).0.keepAlive == true)
    }

    @Test func answersWithoutBodyEndAtTheirHead() throws {
        let (noContent, _) = try read(["HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"])
        #expect(noContent == Answer(status: 204, retryAfter: nil, keepAlive: true, body: "", ended: true))
        let (empty, _) = try read(["HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
        #expect(empty.ended && empty.body.isEmpty)
    }

    @Test func bodyWithoutLengthRunsToTheEndOfTheConnection() throws {
        let (answer, parser) = try read(["HTTP/1.1 503 Service Unavailable\r\n\r\nback ", "soon"])
        #expect(answer == Answer(status: 503, retryAfter: nil, keepAlive: false, body: "back soon", ended: false))
        #expect(parser.endsWithConnection)
    }

    @Test func bytesAfterTheAnswerAreReported() throws {
        let (answer, _) = try read(["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n"])
        #expect(answer.ended && answer.leftover)
        var parser = HTTP1ResponseParser()
        var first = ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        _ = try parser.feed(&first)
        var more = ByteBuffer(string: "x")
        #expect(throws: HTTP1ResponseParser.Failure.self) { try parser.feed(&more) }
    }

    @Test(arguments: [
        ("HTTP/2 200\r\n\r\n", "malformed status line"),
        ("HTTP/1.1 20 OK\r\n\r\n", "malformed status line"),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length \"-1\""),
        ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", "invalid Content-Length \"3\""),
        ("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "malformed header line"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx", "chunk data not followed by CRLF"),
    ])
    func malformedAnswersAreRefused(wire: String, reason: String) throws {
        #expect(throws: HTTP1ResponseParser.Failure(reason: reason)) { try read([wire]) }
    }

    @Test func oversizedHeadIsRefused() throws {
        let wire = "HTTP/1.1 200 OK\r\nX-Filler: " + String(repeating: "a", count: HTTP1ResponseParser.maximumHeadBytes)
        #expect(throws: HTTP1ResponseParser.Failure.self) { try read([wire]) }
    }
}
