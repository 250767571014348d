import FleetEngine
import FleetEngineProtos
import FleetModel
import Foundation
import HTTPServing
import NIOCore
import JSON
import SwiftProtobuf

/// Fleet Engine's gRPC calls, served by the emulator as the REST requests they stand for: a
/// call becomes the equivalent `GET`/`PUT`/`PATCH` (its vehicle as REST's JSON body, in
/// protobuf's JSON mapping: written by `GRPCVehicleJSON` for an update's usual shape, else by
/// protobuf), so both protocols share one state, one token check and one validation; the REST
/// answer becomes the gRPC answer (the vehicle as a message, or
/// `grpc-status` with `google.rpc.Status` details: `RetryInfo` for `Retry-After`, `ErrorInfo`
/// for a quota).
enum GRPCCalls {
    /// Requests with gRPC's content type go to the gRPC route, whatever their path.
    static func isCall(_ request: HTTPRequest) -> Bool {
        request.header("content-type")?.lowercased().hasPrefix("application/grpc") == true
    }

    /// A call as the REST request it stands for, and for an update the vehicle it sent (named):
    /// what the answer carries, as Fleet Engine's updated vehicle does.
    struct Translated {
        let rest: HTTPRequest
        let updated: (any SwiftProtobuf.Message)?
    }

    /// The REST request a call stands for, or the gRPC answer refusing it (an unknown method,
    /// a message that cannot be read, a name that names no vehicle).
    static func restRequest(for call: HTTPRequest) -> Result<Translated, GRPCFailure> {
        guard call.method == "POST" else { return .failure(GRPCFailure(.unimplemented, "gRPC calls are POSTs")) }
        guard let message = GRPCFrame.message(in: ByteBuffer(bytes: call.body)) else {
            return .failure(GRPCFailure(.internal, "the request is not one uncompressed length-prefixed message"))
        }
        do {
            switch call.path {
            case "/maps.fleetengine.v1.VehicleService/GetVehicle":
                let request = try Maps_Fleetengine_V1_GetVehicleRequest(serializedBytes: message)
                return rest(call, "GET", name: request.name, collection: "vehicles")
            case "/maps.fleetengine.v1.VehicleService/UpdateVehicle":
                let request = try Maps_Fleetengine_V1_UpdateVehicleRequest(serializedBytes: message)
                return try rest(call, "PUT", updating: request.vehicle, named: request.name, collection: "vehicles", mask: request.updateMask)
            case "/maps.fleetengine.delivery.v1.DeliveryService/GetDeliveryVehicle":
                let request = try Maps_Fleetengine_Delivery_V1_GetDeliveryVehicleRequest(serializedBytes: message)
                return rest(call, "GET", name: request.name, collection: "deliveryVehicles")
            case "/maps.fleetengine.delivery.v1.DeliveryService/UpdateDeliveryVehicle":
                let request = try Maps_Fleetengine_Delivery_V1_UpdateDeliveryVehicleRequest(serializedBytes: message)
                return try rest(call, "PATCH", updating: request.deliveryVehicle, named: request.deliveryVehicle.name,
                                collection: "deliveryVehicles", mask: request.updateMask)
            default:
                return .failure(GRPCFailure(.unimplemented, "Method not found: \(call.path)"))
            }
        } catch {
            return .failure(GRPCFailure(.invalidArgument, "The request message cannot be read: \(error)"))
        }
    }

    /// An update: REST's body is the vehicle without its name (the path names it); the answer
    /// carries the vehicle as sent, named, without the input-only past locations.
    private static func rest(_ call: HTTPRequest, _ method: String, updating vehicle: some PlainVehicleFields, named name: String,
                             collection: String, mask: Google_Protobuf_FieldMask) throws -> Result<Translated, GRPCFailure> {
        var vehicle = vehicle
        vehicle.name = ""
        let body: [UInt8] = try GRPCVehicleJSON.body(of: vehicle) ?? vehicle.jsonUTF8Bytes()
        vehicle.name = name
        vehicle.pastLocations = []
        return rest(call, method, name: name, collection: collection, mask: mask, body: body, updated: vehicle)
    }

    /// `providers/{provider}/{collection}/{id}` as the REST path `/v1/providers/…`, segments
    /// percent-encoded.
    private static func rest(_ call: HTTPRequest, _ method: String, name: String, collection: String,
                             mask: Google_Protobuf_FieldMask? = nil, body: [UInt8] = [],
                             updated: (any SwiftProtobuf.Message)? = nil) -> Result<Translated, GRPCFailure> {
        let segments = name.split(separator: "/", omittingEmptySubsequences: false)
        guard segments.count == 4, segments[0] == "providers", !segments[1].isEmpty, segments[2] == collection, !segments[3].isEmpty else {
            return .failure(GRPCFailure(.invalidArgument, "name must be providers/{provider}/\(collection)/{id}, not \"\(name)\""))
        }
        let vehicle = VehicleIdentity(kind: collection == "vehicles" ? .vehicle : .deliveryVehicle, id: String(segments[3]))
        let path = FleetEngineRequest.vehiclePath(provider: String(segments[1]), vehicle: vehicle)
        let query = mask.map { ["updateMask": $0.paths.joined(separator: ",")] } ?? [:]
        return .success(Translated(rest: HTTPRequest(method: method, path: path, query: query, headers: call.headers, body: body,
                                                     connection: call.connection), updated: updated))
    }

    /// The gRPC answer for a REST answer: the vehicle as a message (an update's from what it sent,
    /// a read's from the stored JSON), or its error as a status.
    static func answer(_ response: HTTPResponse, for call: HTTPRequest, updated: (any SwiftProtobuf.Message)?) -> HTTPResponse {
        guard (200..<300).contains(response.status) else {
            let message = GoogleAPIError.message(fromBody: String(decoding: response.body, as: UTF8.self)) ?? "HTTP \(response.status)"
            let retryAfter = response.headers.first { $0.name.lowercased() == "retry-after" }.flatMap { Double($0.value) }
            return GRPCFailure(GRPCCode(httpStatus: response.status), message, retryAfterSeconds: retryAfter).response
        }
        do {
            if let updated {
                return HTTPResponse(status: 200, headers: [("content-type", "application/grpc")],
                                    body: framed(try updated.serializedBytes()), trailers: [("grpc-status", "0")])
            }
            let json = String(decoding: response.body, as: UTF8.self)
            let options = { var options = JSONDecodingOptions(); options.ignoreUnknownFields = true; return options }()
            let message: any SwiftProtobuf.Message = call.path.hasPrefix("/maps.fleetengine.delivery.")
                ? try Maps_Fleetengine_Delivery_V1_DeliveryVehicle(jsonString: json, options: options)
                : try Maps_Fleetengine_V1_Vehicle(jsonString: json, options: options)
            let bytes: [UInt8] = try message.serializedBytes()
            return HTTPResponse(status: 200, headers: [("content-type", "application/grpc")], body: framed(bytes),
                                trailers: [("grpc-status", "0")])
        } catch {
            return GRPCFailure(.internal, "The vehicle cannot be encoded: \(error)").response
        }
    }

    private static func framed(_ message: [UInt8]) -> [UInt8] {
        Array(GRPCFrame.framing(message).readableBytesView)
    }
}

/// A gRPC error answer: `grpc-status`, `grpc-message` percent-encoded, and `google.rpc.Status`
/// in `grpc-status-details-bin` (unpadded base64, as gRPC asks servers to send it).
struct GRPCFailure: Error {
    let code: GRPCCode
    let message: String
    var retryAfterSeconds: Double?

    init(_ code: GRPCCode, _ message: String, retryAfterSeconds: Double? = nil) {
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    var response: HTTPResponse {
        var status = Google_Rpc_Status()
        status.code = Int32(code.rawValue)
        status.message = message
        if let retryAfterSeconds {
            var retry = Google_Rpc_RetryInfo()
            retry.retryDelay = Google_Protobuf_Duration(seconds: Int64(retryAfterSeconds),
                                                        nanos: Int32((retryAfterSeconds - retryAfterSeconds.rounded(.down)) * 1e9))
            if let packed = try? Google_Protobuf_Any(message: retry) { status.details.append(packed) }
        }
        if code == .resourceExhausted {
            var info = Google_Rpc_ErrorInfo()
            info.reason = "RATE_LIMIT_EXCEEDED"
            info.domain = "googleapis.com"
            info.metadata = ["service": "fleetengine.googleapis.com"]
            if let packed = try? Google_Protobuf_Any(message: info) { status.details.append(packed) }
        }
        let details = ((try? status.serializedBytes()) as [UInt8]?).map { Data($0).base64EncodedString() } ?? ""
        var trailers = [("grpc-status", String(code.rawValue)), ("grpc-message", Self.percentEncoded(message))]
        if !details.isEmpty { trailers.append(("grpc-status-details-bin", String(details.prefix { $0 != "=" }))) }
        return HTTPResponse(status: 200, headers: [("content-type", "application/grpc")], trailers: trailers)
    }

    /// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`.
    static func percentEncoded(_ text: String) -> String {
        var encoded = ""
        for byte in text.utf8 {
            if byte >= 0x20, byte <= 0x7E, byte != UInt8(ascii: "%") {
                encoded.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                encoded += String(format: "%%%02X", byte)
            }
        }
        return encoded
    }
}
