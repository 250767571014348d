import AsyncHTTPClient
import FleetAuth
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Fleet Engine's REST API for location updates over a pooled keep-alive
/// HTTP client. Tokens are attached per request, never per connection.
///
/// Threading: all methods may be called concurrently; the caller bounds concurrency.
public final class FleetEngineClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: String
        public var provider: String
        public var locationMode: LocationMode
        public var requestTimeout: Duration
        /// Connections kept per host; matches the relay's in-flight limit.
        public var maximumConnections: Int

        public init(baseURL: String = "https://fleetengine.googleapis.com", provider: String,
                    locationMode: LocationMode = .supplemental, requestTimeout: Duration = .seconds(15),
                    maximumConnections: Int = 64) {
            self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
            self.provider = provider
            self.locationMode = locationMode
            self.requestTimeout = requestTimeout
            self.maximumConnections = maximumConnections
        }
    }

    public struct Response: Sendable {
        public let status: Int
        public let outcome: FleetEngineOutcome
        /// The error body's message, for dead-letter details; never includes the request's token.
        public let message: String
    }

    public let configuration: Configuration
    private let http: HTTPClient

    public init(configuration: Configuration) {
        self.configuration = configuration
        var httpConfiguration = HTTPClient.Configuration()
        httpConfiguration.connectionPool = .init(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: configuration.maximumConnections)
        httpConfiguration.timeout = .init(connect: .seconds(10))
        httpConfiguration.decompression = .enabled(limit: .ratio(20))
        // No tracing backend is bootstrapped; without this every request still builds a
        // no-op span and its attributes (a few percent of the relay's CPU per request).
        httpConfiguration.tracing.tracer = nil
        self.http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: httpConfiguration)
    }

    public func shutdown() async {
        try? await http.shutdown()
    }

    /// Sends one update. Transport failures (refused, reset, timeout) come back as a transient outcome.
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
        return await execute(httpRequest)
    }

    /// `GET` of a vehicle as Fleet Engine holds it (status and raw JSON body).
    public func fetchVehicle(_ vehicle: VehicleIdentity, token: String) async -> (status: Int, body: String) {
        var httpRequest = HTTPClientRequest(
            url: configuration.baseURL + FleetEngineRequest.vehiclePath(provider: configuration.provider, vehicle: vehicle))
        httpRequest.headers.add(name: "Authorization", value: "Bearer " + token)
        do {
            let response = try await http.execute(httpRequest, timeout: .init(configuration.requestTimeout))
            let body = try await response.body.collect(upTo: 1 << 20)
            return (Int(response.status.code), String(buffer: body))
        } catch {
            return (0, "\(error)")
        }
    }

    private func execute(_ request: HTTPClientRequest) async -> Response {
        do {
            let response = try await http.execute(request, timeout: .init(configuration.requestTimeout))
            let status = Int(response.status.code)
            let body = try await response.body.collect(upTo: 1 << 20)
            let retryAfter = RetryAfter.seconds(from: response.headers.first(name: "Retry-After"))
            let outcome = FleetEngineOutcome.classify(status: status, retryAfterSeconds: retryAfter)
            return Response(status: status, outcome: outcome, message: outcome == .accepted ? "" : Self.errorMessage(body))
        } catch {
            let cause = (error as? HTTPClientError) == .deadlineExceeded ? "timeout" : "connection"
            return Response(status: 0, outcome: .transient(cause: cause, retryAfterSeconds: nil),
                            message: "request failed: \(error)")
        }
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
