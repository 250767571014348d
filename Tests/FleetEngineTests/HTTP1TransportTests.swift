@testable import Egress
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// The HTTP/1.1 client (async-http-client underneath) against a scripted server that answers
/// each request with the bytes a test chooses: what the server received, on which connection,
/// and what the client made of the answer.
@Suite struct HTTP1TransportTests {
    /// A TCP server that reads whole requests (head plus `Content-Length` body) and answers
    /// each with `script(request number, connection number)`: bytes, whether to close after
    /// them, or nil to never answer.
    final class ScriptedServer: Sendable {
        struct Received: Sendable {
            let connection: Int
            let text: String
        }

        typealias Script = @Sendable (_ request: Int, _ connection: Int) -> (answer: String, close: Bool)?

        let received = Mutex<[Received]>([])
        private let connections = Mutex(0)
        private let channel = Mutex<(any Channel)?>(nil)
        let script: Script

        init(script: @escaping Script) {
            self.script = script
        }

        func start() async throws -> Int {
            let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .childChannelInitializer { [self] child in
                    let number = connections.withLock { $0 += 1; return $0 }
                    return child.eventLoop.makeCompletedFuture {
                        try child.pipeline.syncOperations.addHandler(RequestReader(server: self, connection: number))
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
            channel.withLock { $0 = server }
            return server.localAddress!.port!
        }

        func stop() async throws {
            try await channel.withLock { $0 }?.close()
        }

        var connectionCount: Int { connections.withLock { $0 } }
    }

    final class RequestReader: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let server: ScriptedServer
        let connection: Int
        var pending = ""

        init(server: ScriptedServer, connection: Int) {
            self.server = server
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            pending += String(buffer: unwrapInboundIn(data))
            while let request = takeRequest() {
                let number = server.received.withLock { received in
                    received.append(.init(connection: connection, text: request))
                    return received.count
                }
                guard let (answer, close) = server.script(number, connection) else { continue }
                let written = context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: answer)))
                if close { written.whenComplete { [channel = context.channel] _ in channel.close(promise: nil) } }
            }
        }

        private func takeRequest() -> String? {
            guard let headEnd = pending.range(of: "\r\n\r\n") else { return nil }
            let head = pending[..<headEnd.lowerBound]
            let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            guard pending.utf8.count >= pending[..<headEnd.upperBound].utf8.count + length else { return nil }
            let end = pending.utf8.index(headEnd.upperBound, offsetBy: length)
            let request = String(pending[..<end])
            pending = String(pending[end...])
            return request
        }
    }

    func update(_ token: String = "Bearer a.b.c") -> EgressRequest {
        EgressRequest(method: "PUT", path: "/v1/providers/p/vehicles/v1?updateMask=last_location",
                      authorization: token, contentType: "application/json", body: ByteBuffer(string: "{\"x\":1}"))
    }

    /// A scripted server and a pool to it, for `body`; both closed after.
    func withServer(requestTimeout: TimeAmount = .seconds(10), _ script: @escaping ScriptedServer.Script,
                    _ body: (_ server: ScriptedServer, _ client: HTTP1Client, _ port: Int) async throws -> Void) async throws {
        let server = ScriptedServer(script: script)
        let port = try await server.start()
        let client = HTTP1Client(origin: "http://127.0.0.1:\(port)", egress: .standard, maximumConnections: 4,
                                 connectTimeout: .seconds(5), requestTimeout: requestTimeout)
        try await body(server, client, port)
        try await server.stop()
    }

    /// The request fails, and the relay's description of why has the cause `expected`.
    func expectFailure(_ client: HTTP1Client, _ request: EgressRequest, _ what: String,
                       _ expected: TransportFailure.Cause) async {
        do {
            let response = try await client.execute(request)
            Issue.record("\(what): the request succeeded with \(response.status)")
        } catch {
            #expect(TransportFailure.describe(error).cause == expected, "\(what): \(error)")
        }
    }

    static let emptyAnswer = ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false)

    @Test func requestGoesOutAsOneWellFormedMessageAndChunkedAnswersKeepTheConnection() async throws {
        try await withServer({ _, _ in
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n3\r\n\":1\r\n1\r\n}\r\n0\r\n\r\n", false)
        }) { server, client, port in
            for _ in 0..<3 {
                let response = try await client.execute(update())
                #expect(response.status == 200)
                #expect(String(buffer: response.body) == "{\"a\":1}")
            }
            let received = server.received.withLock { $0 }
            #expect(received.count == 3)
            #expect(Set(received.map(\.connection)) == [1], "keep-alive: all three on one connection")
            let lines = (received.first?.text ?? "").components(separatedBy: "\r\n")
            #expect(lines.first == "PUT /v1/providers/p/vehicles/v1?updateMask=last_location HTTP/1.1")
            let fields = Set(lines.dropFirst().prefix { !$0.isEmpty }.map { $0.lowercased() })
            #expect(fields.isSuperset(of: ["host: 127.0.0.1:\(port)", "authorization: bearer a.b.c", "content-type: application/json",
                                           "content-length: 7"]), "\(fields)")
            #expect(lines.last == "{\"x\":1}")
        }
    }

    @Test func answerEndingWithTheConnectionIsReadWholeAndTheNextRequestUsesANewOne() async throws {
        try await withServer({ request, _ in
            request == 1 ? ("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\n\r\nback soon", true) : Self.emptyAnswer
        }) { server, client, _ in
            let first = try await client.execute(update())
            #expect(first.status == 503)
            #expect(first.retryAfter == "3")
            #expect(String(buffer: first.body) == "back soon")
            #expect(try await client.execute(update()).status == 200)
            #expect(server.received.withLock { $0.map(\.connection) } == [1, 2])
        }
    }

    @Test func aLineBreakInAHeaderValueIsNeverSent() async throws {
        try await withServer({ _, _ in Self.emptyAnswer }) { server, client, _ in
            await expectFailure(client, update("Bearer a.b.c\r\nX-Injected: 1"), "a token with a line break", .connection)
            let next = try await client.execute(update())
            #expect(next.status == 200, "the next request goes through")
            let received = server.received.withLock { $0 }
            #expect(received.count == 1)
            #expect(received.allSatisfy { !$0.text.contains("X-Injected") })
        }
    }

    @Test func unansweredRequestTimesOutAndClosesItsConnection() async throws {
        try await withServer(requestTimeout: .milliseconds(300), { request, _ in request == 1 ? nil : Self.emptyAnswer }) { server, client, _ in
            await expectFailure(client, update(), "an unanswered request", .timeout)
            let next = try await client.execute(update())
            #expect(next.status == 200, "the next request goes through")
            #expect(server.received.withLock { $0.map(\.connection) } == [1, 2])
        }
    }

    /// What RFC 9112 says a client must refuse, refused by the decoder, and the connection with
    /// it: both framings at once (§6.3: a request smuggling vector), conflicting or invalid
    /// lengths, broken chunks, a head that is not HTTP/1.1, bytes nobody asked for.
    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
    ])
    func malformedAnswerFailsTheRequestAndTheConnection(wire: String) async throws {
        try await withServer({ request, _ in request == 1 ? (wire, false) : Self.emptyAnswer }) { server, client, _ in
            await expectFailure(client, update(), wire, .connection)
            let next = try await client.execute(update())
            #expect(next.status == 200, "the next request goes through")
            #expect(server.received.withLock { $0.map(\.connection) } == [1, 2], "on a new connection")
        }
    }

    /// An answer nobody asked for would be read as the next request's: the connection closes.
    /// A request that raced with that close fails as a connection failure (the relay retries
    /// it); none reads the smuggled answer.
    @Test func bytesAfterTheAnswerCloseTheConnection() async throws {
        try await withServer({ request, _ in
            request == 1 ? ("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 299 Smuggled\r\nContent-Length: 0\r\n\r\n", false)
                : Self.emptyAnswer
        }) { server, client, _ in
            let first = try await client.execute(update())
            #expect(first.status == 200)
            var statuses: [Int] = []
            for _ in 0..<3 where statuses.last != 200 {
                do {
                    statuses.append(try await client.execute(update()).status)
                } catch {
                    #expect(TransportFailure.describe(error).cause == .connection, "\(error)")
                }
            }
            #expect(statuses.last == 200, "\(statuses)")
            #expect(!statuses.contains(299), "the smuggled answer was read as an answer")
            #expect(server.received.withLock { $0.last?.connection } == 2, "the answer came on a new connection")
        }
    }

    @Test func informationalAnswersAndAnswersWithoutBodyAreRead() async throws {
        try await withServer({ request, _ in
            switch request {
            case 1: ("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false)
            default: ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;ext=1\r\n{}\r\n0\r\nTrailer: x\r\n\r\n", false)
            }
        }) { server, client, _ in
            #expect(try await client.execute(update()).status == 204)
            let chunked = try await client.execute(update())
            #expect(chunked.status == 200)
            #expect(String(buffer: chunked.body) == "{}")
            #expect(server.received.withLock { $0.map(\.connection) } == [1, 1], "one connection throughout")
        }
    }
}
