import Synchronization

/// A request as the responder sees it: fully read, body included.
public struct HTTPRequest: Sendable {
    public let method: String
    /// The path without the query, still percent-encoded.
    public let path: String
    public let query: [String: String]
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// The connection the request came on: a slow responder can notice its client going away.
    public let connection: ClientConnection

    public init(method: String, path: String, query: [String: String], headers: [(name: String, value: String)],
                body: [UInt8], connection: ClientConnection = ClientConnection()) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.connection = connection
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// Sent after the body (HTTP/2 only): gRPC's status.
    public var trailers: [(name: String, value: String)]?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                trailers: [(name: String, value: String)]? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.trailers = trailers
    }

    public static func json(_ status: Int, _ body: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: Array(body.utf8))
    }

    public static func text(_ status: Int, _ body: String, contentType: String = "text/plain; charset=utf-8") -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)], body: Array(body.utf8))
    }
}

/// Whether a request's client still holds its connection. A responder that takes long (an
/// emulated slow backend) waits through `hold(for:)`, which ends early when the client closed
/// the connection, as a front end drops a request whose caller went away.
public final class ClientConnection: Sendable {
    private struct State {
        var closed = false
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
    }

    private let state = Mutex(State())

    public init() {}

    public var isClosed: Bool { state.withLock(\.closed) }

    /// Waits for `duration`; false when the client closed the connection first.
    public func hold(for duration: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { (try? await Task.sleep(for: duration)) != nil }
            group.addTask { await self.closed(); return false }
            let first = await group.next()!
            group.cancelAll()
            return first && !isClosed
        }
    }

    func close() {
        let waiters = state.withLock { state in
            state.closed = true
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        waiters.forEach { $0.resume() }
    }

    /// Returns once the connection closed, or the task was cancelled.
    private func closed() async {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.closed || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}

