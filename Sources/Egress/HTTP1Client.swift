import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// Requests to an origin that does not speak HTTP/2 (plain http, `--http-version 1.1`, or a
/// server whose TLS does not offer `h2`), through async-http-client as HTTP/1.1 over keep-alive
/// connections, one request at a time each. It brings the same egress as the HTTP/2 transport
/// (trust anchors, the CONNECT proxy for https) and answers in the same terms. Its connections
/// belong to a client that lives as long as the process, shared by every `HTTP1Client` of the
/// same egress and pool settings.
public struct HTTP1Client: Sendable {
    private let client: HTTPClient
    /// `scheme://host[:port]`, to which a request's path is appended.
    private let origin: String
    private let requestTimeout: TimeAmount

    /// - Parameters:
    ///   - origin: `http(s)://host[:port]`.
    ///   - maximumConnections: connections kept per host at most; the caller bounds concurrency.
    public init(origin: String, egress: Egress, maximumConnections: Int, connectTimeout: TimeAmount, requestTimeout: TimeAmount) {
        var http1 = egress
        http1.httpVersion = .http1
        self.client = ProcessClients.client(for: origin, egress: http1, pool: (maximumConnections, connectTimeout))
        self.origin = origin
        self.requestTimeout = requestTimeout
    }

    /// The answer read whole (at most `Exchange.maximumBodyBytes`), or why there is none.
    /// The request timeout covers sending and the whole answer.
    public func execute(_ request: EgressRequest) async throws -> EgressResponse {
        var outgoing = HTTPClientRequest(url: origin + request.path.text)
        outgoing.method = HTTPMethod(rawValue: request.method)
        if let authorization = request.authorization ?? request.bearerToken.map({ "Bearer " + $0.text }) {
            outgoing.headers.add(name: "authorization", value: authorization)
        }
        if let contentType = request.contentType { outgoing.headers.add(name: "content-type", value: contentType) }
        for header in request.otherHeaders { outgoing.headers.add(name: header.name, value: header.value) }
        if let body = request.body { outgoing.body = .bytes(body) }
        let deadline = NIODeadline.now() + requestTimeout
        let response = try await client.execute(outgoing, deadline: deadline)
        let body: ByteBuffer
        do {
            body = try await response.body.collect(upTo: Exchange.maximumBodyBytes)
        } catch is NIOTooManyBytesError {
            throw ExchangeError.responseTooLarge(Exchange.maximumBodyBytes)
        }
        return EgressResponse(status: Int(response.status.code), retryAfter: response.headers.first(name: "retry-after"), body: body)
    }
}
