import AsyncHTTPClient
import Egress
import FleetAuth
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Fleet Engine's REST API for location updates over HTTPS (HTTP/2 where negotiated).
/// Tokens are attached per request, never per connection.
///
/// One HTTP/2 connection carries at most the server's stream limit (Fleet Engine's
/// front ends advertise 100) and AsyncHTTPClient queues anything beyond it behind that
/// one connection. So the client keeps `ceil(maximumInFlight / streamsPerConnection)`
/// HTTP clients, each with its own connection, and sends each request on the one with
/// the fewest requests under way. Over HTTP/1.1 the same clients pool up to
/// `maximumInFlight` connections between them.
///
/// Threading: all methods may be called concurrently; the caller bounds concurrency.
public final class FleetEngineClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: String
        public var provider: String
        public var locationMode: LocationMode
        public var requestTimeout: Duration
        /// Requests the caller has under way at most (the relay's in-flight limit).
        public var maximumInFlight: Int
        /// HTTP/2 streams one connection is given at most; the server's advertised limit.
        public var streamsPerConnection: Int
        public var egress: Egress

        public init(baseURL: String = "https://fleetengine.googleapis.com", provider: String,
                    locationMode: LocationMode = .supplemental, requestTimeout: Duration = .seconds(15),
                    maximumInFlight: Int = 64, streamsPerConnection: Int = 100, egress: Egress = .standard) {
            self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
            self.provider = provider
            self.locationMode = locationMode
            self.requestTimeout = requestTimeout
            self.maximumInFlight = maximumInFlight
            self.streamsPerConnection = streamsPerConnection
            self.egress = egress
        }

        /// HTTP clients (so HTTP/2 connections) the in-flight limit needs.
        public var connectionCount: Int {
            max(1, (maximumInFlight + streamsPerConnection - 1) / max(1, streamsPerConnection))
        }
    }

    public struct Response: Sendable {
        public let status: Int
        public let outcome: FleetEngineOutcome
        /// The error body's message, for dead-letter details; never includes the request's token.
        public let message: String
    }

    /// A vehicle as Fleet Engine holds it, or why it could not be read.
    public struct VehicleFetch: Sendable {
        public let status: Int
        public let body: String
        /// Why there is no answer (status 0).
        public let failure: TransportFailure?
    }

    public let configuration: Configuration
    private let clients: [HTTPClient]
    private let requestsUnderWay: Mutex<[Int]>

    public init(configuration: Configuration) {
        self.configuration = configuration
        var base = HTTPClient.Configuration()
        let connectionCount = configuration.connectionCount
        base.connectionPool = .init(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: (configuration.maximumInFlight + connectionCount - 1) / connectionCount)
        // A connection that cannot be made fails its requests at once: the relay retries them with
        // its own backoff, and a TLS or proxy refusal is reported when it happens, not after the timeout.
        base.connectionPool.retryConnectionEstablishment = false
        base.timeout = .init(connect: .seconds(10))
        // Fleet Engine's answers are small JSON: a decompressor would be one more handler in
        // every HTTP/2 stream's pipeline and an Accept-Encoding header on every request.
        base.decompression = .disabled
        // No tracing backend is bootstrapped; without this every request still builds a
        // no-op span and its attributes (a few percent of the relay's CPU per request).
        base.tracing.tracer = nil
        let httpConfiguration = configuration.egress.clientConfiguration(for: configuration.baseURL, base: base)
        self.clients = (0..<connectionCount).map { _ in
            HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: httpConfiguration)
        }
        self.requestsUnderWay = Mutex(Array(repeating: 0, count: connectionCount))
    }

    public func shutdown() async {
        for client in clients { try? await client.shutdown() }
    }

    /// Sends one update. Transport failures (refused, reset, timeout, TLS) come back as a transient outcome.
    public func send(_ update: VehicleLocationUpdate, token: String) async -> Response {
        let request = FleetEngineRequest(update: update, provider: configuration.provider, mode: configuration.locationMode)
        return await send(request, token: token)
    }

    public func send(_ request: FleetEngineRequest, token: String) async -> Response {
        var httpRequest = HTTPClientRequest(url: configuration.baseURL + request.pathAndQuery)
        httpRequest.method = HTTPMethod(rawValue: request.method)
        httpRequest.headers.add(name: "Authorization", value: "Bearer " + token)
        httpRequest.headers.add(name: "Content-Type", value: "application/json")
        httpRequest.body = .bytes(ByteBuffer(bytes: request.bodyBytes))
        switch await execute(httpRequest) {
        case .success(let (status, headers, body)):
            let retryAfter = RetryAfter.seconds(from: headers.first(name: "Retry-After"))
            let outcome = FleetEngineOutcome.classify(status: status, retryAfterSeconds: retryAfter)
            return Response(status: status, outcome: outcome, message: outcome == .accepted ? "" : Self.errorMessage(body))
        case .failure(let failure):
            return Response(status: 0, outcome: .transient(cause: failure.cause, retryAfterSeconds: nil), message: failure.message)
        }
    }

    /// `GET` of a vehicle as Fleet Engine holds it (status and raw JSON body).
    public func fetchVehicle(_ vehicle: VehicleIdentity, token: String) async -> VehicleFetch {
        var httpRequest = HTTPClientRequest(
            url: configuration.baseURL + FleetEngineRequest.vehiclePath(provider: configuration.provider, vehicle: vehicle))
        httpRequest.headers.add(name: "Authorization", value: "Bearer " + token)
        switch await execute(httpRequest) {
        case .success(let (status, _, body)): return VehicleFetch(status: status, body: String(buffer: body), failure: nil)
        case .failure(let failure): return VehicleFetch(status: 0, body: "", failure: failure)
        }
    }

    private func execute(_ request: HTTPClientRequest) async -> Result<(Int, HTTPHeaders, ByteBuffer), TransportFailure> {
        let index = takeLeastBusyClient()
        defer { release(index) }
        do {
            let response = try await clients[index].execute(request, timeout: .init(configuration.requestTimeout))
            let body = try await response.body.collect(upTo: 1 << 20)
            if configuration.egress.httpVersion == .http2, response.version.major != 2 {
                return .failure(TransportFailure(cause: "http_version", message: "Fleet Engine answered over HTTP/"
                    + "\(response.version.major).\(response.version.minor), but --http-version 2 requires HTTP/2"))
            }
            return .success((Int(response.status.code), response.headers, body))
        } catch {
            let failure = TransportFailure.describe(error)
            return .failure(TransportFailure(cause: failure.cause, message: "request failed: \(failure.message)"))
        }
    }

    /// The client with the fewest requests under way: no client ever holds more than
    /// `ceil(maximumInFlight / clients)`, so none queues behind its stream limit.
    private func takeLeastBusyClient() -> Int {
        guard clients.count > 1 else { return 0 }
        return requestsUnderWay.withLock { counts in
            let index = counts.indices.min { counts[$0] < counts[$1] }!
            counts[index] += 1
            return index
        }
    }

    private func release(_ index: Int) {
        guard clients.count > 1 else { return }
        requestsUnderWay.withLock { $0[index] -= 1 }
    }

    /// `error.message` from a Google API error body, else the body's start.
    private static func errorMessage(_ body: ByteBuffer) -> String {
        let text = String(buffer: body)
        if let message = GoogleAPIError.message(fromBody: text) { return message }
        return String(text.prefix(200))
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
