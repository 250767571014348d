import Egress
import FleetEngineProtos
import Foundation
import NIOCore
import SwiftProtobuf

/// A gRPC call's outcome as the relay reads it: the code, what the server said, and when it
/// asked to be tried again.
public struct GRPCAnswer: Sendable, Equatable {
    public let code: GRPCCode
    /// `grpc-message`, percent-decoded; with `ErrorInfo`'s reason when the details carry one.
    public let message: String
    /// `google.rpc.RetryInfo.retry_delay` from `grpc-status-details-bin`: gRPC's `Retry-After`.
    public let retryDelaySeconds: Double?

    public init(code: GRPCCode, message: String, retryDelaySeconds: Double? = nil) {
        self.code = code
        self.message = message
        self.retryDelaySeconds = retryDelaySeconds
    }

    /// Reads the trailers (or a trailers-only answer's headers); an HTTP status other than 200
    /// is mapped as gRPC clients map it, and a 200 without `grpc-status` is INTERNAL.
    public init(_ response: EgressResponse) {
        guard response.status == 200 else {
            let code = GRPCCode(nonGRPCStatus: response.status)
            self.init(code: code, message: "HTTP \(response.status) instead of a gRPC answer")
            return
        }
        guard let fields = response.grpc else {
            self.init(code: .internal, message: "the answer ended without grpc-status")
            return
        }
        let code = Int(fields.status).flatMap(GRPCCode.init(rawValue:)) ?? .unknown
        // Percent-encoded UTF-8; a malformed escape leaves the text as it came.
        var message = fields.message.map { $0.removingPercentEncoding ?? $0 } ?? ""
        var retryDelay: Double?
        if let details = fields.detailsBase64.flatMap(Self.status(fromBase64:)) {
            if message.isEmpty { message = details.message }
            for detail in details.details {
                if let retry = try? Google_Rpc_RetryInfo(unpackingAny: detail), retry.hasRetryDelay {
                    retryDelay = Double(retry.retryDelay.seconds) + Double(retry.retryDelay.nanos) / 1e9
                } else if let info = try? Google_Rpc_ErrorInfo(unpackingAny: detail), !info.reason.isEmpty {
                    message += " (\(info.reason))"
                }
            }
        }
        self.init(code: code, message: message, retryDelaySeconds: retryDelay)
    }

    /// `google.rpc.Status` from its base64, padded or not as gRPC allows.
    static func status(fromBase64 text: String) -> Google_Rpc_Status? {
        var padded = text
        while padded.utf8.count % 4 != 0 { padded += "=" }
        guard let bytes = Data(base64Encoded: padded) else { return nil }
        return try? Google_Rpc_Status(serializedBytes: bytes)
    }

    /// The code and the message, for dead letters and logs: `NOT_FOUND: Vehicle veh-1 does not exist.`
    public var detail: String { code.name + ": " + message }
}
