import Egress
import FleetAuth
import FleetModel
import Foundation
import Logging
import NIOCore
import Synchronization

/// Fleet Engine's location updates and live-location reads, over REST (JSON; HTTP/2 where
/// negotiated) or gRPC (HTTP/2 only). Tokens are attached per request, never per connection.
///
/// Over HTTPS the requests travel on the relay's own HTTP/2 transport
/// (`HTTP2ConnectionPool`): at least one connection per event loop, and more as the
/// server's announced stream limit requires (Fleet Engine's front ends announce 100), each
/// request on the one with the fewest under way on the caller's event loop (see
/// `connectionExecutors`). Over HTTP/1.1 (`--http-version 1.1`, plain http, or a server that
/// does not offer `h2`) they go through async-http-client (`HTTP1Client`).
///
/// Threading: all methods may be called concurrently; the caller bounds concurrency.
public final class FleetEngineClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: String
        public var provider: String
        public var locationMode: LocationMode
        /// REST or gRPC; gRPC needs HTTP/2.
        public var wireProtocol: FleetEngineProtocol
        public var requestTimeout: Duration
        /// Requests the caller has under way at most (the relay's in-flight limit).
        public var maximumInFlight: Int
        /// HTTP/2 streams one connection is given at most, below the limit the server announces.
        public var streamsPerConnection: Int
        /// When an HTTP/2 connection is pinged, found dead, or closed as idle.
        public var liveness: HTTP2Liveness
        public var egress: Egress

        public init(baseURL: String = "https://fleetengine.googleapis.com", provider: String,
                    locationMode: LocationMode = .supplemental, wireProtocol: FleetEngineProtocol = .rest,
                    requestTimeout: Duration = .seconds(15),
                    maximumInFlight: Int = 64, streamsPerConnection: Int = 100, liveness: HTTP2Liveness = .init(),
                    egress: Egress = .standard) {
            self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
            self.provider = provider
            self.locationMode = locationMode
            self.wireProtocol = wireProtocol
            self.requestTimeout = requestTimeout
            self.maximumInFlight = maximumInFlight
            self.streamsPerConnection = streamsPerConnection
            self.liveness = liveness
            self.egress = egress
        }
    }

    public struct Response: Sendable {
        public let status: Int
        public let outcome: FleetEngineOutcome
        /// The error body's message, for dead-letter details; never includes the request's token.
        public let message: String
    }

    /// The time of a vehicle's location as Fleet Engine holds it, or why it could not be read.
    public struct VehicleFetch: Sendable {
        /// The HTTP status, or under gRPC the one Google's APIs give its code; 0 without an answer.
        public let status: Int
        /// The newest of the live location's times; nil when the vehicle has no location yet.
        public let locationMilliseconds: Int64?
        /// Why the read was refused, or why there is no answer; never includes the token.
        public let message: String
        /// Why there is no answer (status 0).
        public let failure: TransportFailure?
    }

    public let configuration: Configuration
    /// The provider's vehicle collections, where every request's path starts.
    private let collectionPaths: VehicleCollectionPaths
    /// The headers every gRPC call adds to the relay's own.
    private let grpcHeaders: [(name: String, value: String)]
    private let transport: Result<Transport, TransportFailure>
    /// Set when the server did not offer `h2` with `--http-version auto`: HTTP/1.1 from then on.
    private let http2Unavailable = Atomic(false)

    private struct Transport: Sendable {
        /// Nil when HTTP/1.1 is configured or the URL is plain http.
        let http2: HTTP2ConnectionPool?
        let http1: HTTP1Client
    }

    public init(configuration: Configuration) {
        self.configuration = configuration
        self.collectionPaths = VehicleCollectionPaths(provider: configuration.provider)
        self.grpcHeaders = GRPCRequest.headers(timeout: configuration.requestTimeout, provider: configuration.provider)
        self.transport = Self.transport(for: configuration)
    }

    /// The HTTP/2 connections the client has opened and keeps; nil over HTTP/1.1.
    public var http2ConnectionCount: Int? {
        guard case .success(let transport) = transport else { return nil }
        return transport.http2?.connectionCount
    }

    /// The HTTP/2 connections the client opens at most; nil over HTTP/1.1.
    public var http2ConnectionLimit: Int? {
        guard case .success(let transport) = transport else { return nil }
        return transport.http2?.connectionLimit
    }

    /// Executors on the event loops of the client's connections: a task preferring one
    /// sends and is resumed on the same thread as its connection.
    public var connectionExecutors: [EventLoopTaskExecutor] { EventLoopTaskExecutor.singletonLoops }

    /// The pools for the base URL; what is wrong with it otherwise, reported by every request.
    private static func transport(for configuration: Configuration) -> Result<Transport, TransportFailure> {
        guard let url = URLComponents(string: configuration.baseURL), let scheme = url.scheme, scheme == "https" || scheme == "http",
              let host = url.host, !host.isEmpty
        else {
            return .failure(TransportFailure(cause: .connection, message: "not an http(s) URL: \(configuration.baseURL)"))
        }
        let https = scheme == "https"
        let port = url.port ?? (https ? 443 : 80)
        let egress = configuration.egress
        let grpc = configuration.wireProtocol == .grpc
        if grpc, !https || egress.httpVersion == .http1 {
            return .failure(TransportFailure(cause: .httpVersion,
                                             message: "gRPC needs HTTP/2, which the relay negotiates over https only (not with --http-version 1.1)"))
        }
        let timeout = TimeAmount(configuration.requestTimeout)
        do {
            let http2 = https && egress.httpVersion != .http1
                // A connection carries at least one stream: as many connections as requests at most.
                ? try HTTP2ConnectionPool(host: host, port: port, egress: egress, streamsPerConnection: configuration.streamsPerConnection,
                                          maximumConnections: configuration.maximumInFlight,
                                          offerHTTP1: egress.httpVersion == .automatic && !grpc, connectTimeout: connectTimeout,
                                          requestTimeout: timeout, liveness: configuration.liveness)
                : nil
            let authority = host.contains(":") ? "[\(host)]" : host
            let http1 = HTTP1Client(origin: "\(scheme)://\(authority):\(port)", egress: egress,
                                    maximumConnections: configuration.maximumInFlight, connectTimeout: connectTimeout,
                                    requestTimeout: timeout)
            return .success(Transport(http2: http2, http1: http1))
        } catch {
            return .failure(TransportFailure(cause: .tls, message: "TLS cannot be set up: \(error)"))
        }
    }

    private static let connectTimeout = TimeAmount.seconds(10)

    public func shutdown() async {
        guard case .success(let transport) = transport else { return }
        await transport.http2?.shutdown()
    }

    /// Sends one update over the configured protocol.
    /// - Parameter resent: `start` sent it already, and the server certainly did not process it:
    ///   this is its one resend.
    public func send(_ update: VehicleLocationUpdate, token: String, resent: Bool = false) async -> Response {
        Self.updateResponse(await execute(updateExchange(update, token: token), resendsOnce: !resent),
                            over: configuration.wireProtocol)
    }

    /// Starts an update at once on a ready HTTP/2 connection of the caller's event loop, where
    /// `receiver` then hears the answer; `startedUpdateResponse` reads it. Returns nil without
    /// starting when no such connection is ready (being opened, HTTP/1.1, only other loops'
    /// free): `send` it.
    public func start(_ update: VehicleLocationUpdate, token: some BearerToken,
                      answerTo receiver: some EgressAnswerReceiver) -> EgressCall? {
        guard case .success(let transport) = transport, let http2 = transport.http2, !http2Unavailable.load(ordering: .relaxed)
        else { return nil }
        return http2.start(updateExchange(update, token: token), answerTo: receiver)
    }

    /// The answer to an update `start` started, or nil when the server certainly did not
    /// process it (a connection going away): `send` it then, as `resent`.
    public func startedUpdateResponse(_ result: Result<EgressResponse, any Error>) -> Response? {
        switch result {
        case .success(let response): Self.updateResponse(.success(response), over: configuration.wireProtocol)
        case .failure(let error as ExchangeError) where error.isSafeToRetry: nil
        case .failure(let error): Self.updateResponse(.failure(Self.failure(error)), over: configuration.wireProtocol)
        }
    }

    /// An update's exchange over the configured protocol.
    private func updateExchange(_ update: VehicleLocationUpdate, token: some BearerToken) -> EgressRequest {
        switch configuration.wireProtocol {
        case .rest:
            restExchange(FleetEngineRequest(update: update, collections: collectionPaths, mode: configuration.locationMode),
                         token: token)
        case .grpc:
            grpcExchange(GRPCRequest(update: update, provider: configuration.provider, mode: configuration.locationMode),
                         token: token)
        }
    }

    /// How an update's outcome over `wireProtocol` reads as a `Response`.
    private static func updateResponse(_ result: Result<EgressResponse, TransportFailure>,
                                       over wireProtocol: FleetEngineProtocol) -> Response {
        switch wireProtocol {
        case .rest: restResponse(result)
        case .grpc: grpcResponse(result)
        }
    }

    public func send(_ request: FleetEngineRequest, token: String) async -> Response {
        Self.restResponse(await execute(restExchange(request, token: token)))
    }

    private func restExchange(_ request: FleetEngineRequest, token: some BearerToken) -> EgressRequest {
        EgressRequest(method: request.method, path: request.path, bearerToken: token,
                      contentType: "application/json", body: request.bodyBuffer)
    }

    private static func restResponse(_ result: Result<EgressResponse, TransportFailure>) -> Response {
        switch result {
        case .success(let response):
            let retryAfter = RetryAfter.seconds(from: response.retryAfter)
            let outcome = FleetEngineOutcome.classify(status: response.status, retryAfterSeconds: retryAfter)
            return Response(status: response.status, outcome: outcome,
                            message: outcome == .accepted ? "" : Self.errorMessage(response.body))
        case .failure(let failure):
            return Response(status: 0, outcome: .transient(cause: .transport(failure.cause), retryAfterSeconds: nil), message: failure.message)
        }
    }

    /// A gRPC update call. Its answer takes the path of the HTTP status Google's APIs give its
    /// code, with `RetryInfo` as `Retry-After`; the message names the code.
    public func send(_ request: GRPCRequest, token: String) async -> Response {
        Self.grpcResponse(await execute(grpcExchange(request, token: token)))
    }

    private static func grpcResponse(_ result: Result<EgressResponse, TransportFailure>) -> Response {
        switch result {
        case .success(let response):
            let answer = GRPCAnswer(response)
            let status = answer.code.httpStatus
            let outcome = FleetEngineOutcome.classify(status: status, retryAfterSeconds: answer.retryDelaySeconds)
            return Response(status: status, outcome: outcome, message: outcome == .accepted ? "" : answer.detail)
        case .failure(let failure):
            return Response(status: 0, outcome: .transient(cause: .transport(failure.cause), retryAfterSeconds: nil), message: failure.message)
        }
    }

    /// Reads the time of a vehicle's live location: `GET` over REST, `GetVehicle` or
    /// `GetDeliveryVehicle` over gRPC.
    public func fetchVehicle(_ vehicle: VehicleIdentity, token: String) async -> VehicleFetch {
        switch configuration.wireProtocol {
        case .rest: await fetchVehicleOverREST(vehicle, token: token)
        case .grpc: await fetchVehicleOverGRPC(vehicle, token: token)
        }
    }

    private func fetchVehicleOverREST(_ vehicle: VehicleIdentity, token: String) async -> VehicleFetch {
        let exchange = EgressRequest(method: "GET", path: collectionPaths.path(of: vehicle), bearerToken: token)
        switch await execute(exchange) {
        case .success(let response):
            let body = String(buffer: response.body)
            guard response.status == 200 else {
                return VehicleFetch(status: response.status, locationMilliseconds: nil, message: Self.errorMessage(body), failure: nil)
            }
            return VehicleFetch(status: 200, locationMilliseconds: LiveLocation.milliseconds(fromVehicleBody: body), message: "", failure: nil)
        case .failure(let failure):
            return VehicleFetch(status: 0, locationMilliseconds: nil, message: failure.message, failure: failure)
        }
    }

    private func fetchVehicleOverGRPC(_ vehicle: VehicleIdentity, token: String) async -> VehicleFetch {
        let request = GRPCRequest(read: vehicle, provider: configuration.provider)
        switch await execute(grpcExchange(request, token: token)) {
        case .success(let response):
            let answer = GRPCAnswer(response)
            guard answer.code == .ok else {
                return VehicleFetch(status: answer.code.httpStatus, locationMilliseconds: nil, message: answer.detail, failure: nil)
            }
            guard let location = try? LiveLocation.milliseconds(fromVehicleMessage: response.body, kind: vehicle.kind) else {
                return VehicleFetch(status: 500, locationMilliseconds: nil, message: "the vehicle's message could not be read", failure: nil)
            }
            return VehicleFetch(status: 200, locationMilliseconds: location, message: "", failure: nil)
        case .failure(let failure):
            return VehicleFetch(status: 0, locationMilliseconds: nil, message: failure.message, failure: failure)
        }
    }

    private func grpcExchange(_ request: GRPCRequest, token: some BearerToken) -> EgressRequest {
        EgressRequest(method: "POST", path: request.path, bearerToken: token, contentType: "application/grpc",
                      otherHeaders: grpcHeaders, body: request.framedMessage)
    }

    private func execute(_ request: EgressRequest, resendsOnce: Bool = true) async -> Result<EgressResponse, TransportFailure> {
        let transport: Transport
        switch self.transport {
        case .success(let ready): transport = ready
        case .failure(let failure): return .failure(failure)
        }
        do {
            if let http2 = transport.http2, !http2Unavailable.load(ordering: .relaxed) {
                do {
                    return .success(try await http2.execute(request, resendsOnce: resendsOnce))
                } catch ExchangeError.http2NotNegotiated(let named) {
                    guard configuration.egress.httpVersion == .automatic else {
                        return .failure(TransportFailure(cause: .httpVersion, message: "Fleet Engine did not negotiate HTTP/2 (ALPN answered "
                            + (named.map { "\"\($0)\"" } ?? "nothing") + "), but --http-version 2 requires it"))
                    }
                    http2Unavailable.store(true, ordering: .relaxed)
                }
            }
            return .success(try await transport.http1.execute(request))
        } catch {
            return .failure(Self.failure(error))
        }
    }

    private static func failure(_ error: any Error) -> TransportFailure {
        let failure = TransportFailure.describe(error)
        return TransportFailure(cause: failure.cause, message: "request failed: \(failure.message)")
    }

    /// `error.message` from a Google API error body, else the body's start.
    private static func errorMessage(_ body: ByteBuffer) -> String { errorMessage(String(buffer: body)) }

    static func errorMessage(_ text: String) -> String {
        if let message = GoogleAPIError.message(fromBody: text) { return message }
        return String(text.prefix(200))
    }
}

/// The token cache hands out a token's text kept compactly: the request writes it in place.
extension TokenText: BearerToken {}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
