import Egress
import FleetEngine
import FleetEngineProtos
import FleetModel
import Foundation
import NIOCore
import SwiftProtobuf
import Testing

/// gRPC's framing and status fields as the client writes and reads them, without a socket.
@Suite struct GRPCMessageTests {
    func details(_ build: (inout Google_Rpc_Status) throws -> Void) throws -> String {
        var status = Google_Rpc_Status()
        try build(&status)
        let bytes: [UInt8] = try status.serializedBytes()
        return Data(bytes).base64EncodedString()
    }

    func response(status: Int = 200, _ fields: GRPCStatusFields?) -> EgressResponse {
        EgressResponse(status: status, retryAfter: nil, grpc: fields, body: ByteBuffer())
    }

    @Test func readsTheCodeThePercentDecodedMessageAndRetryInfo() throws {
        let details = try details { status in
            status.code = 8
            var retry = Google_Rpc_RetryInfo()
            retry.retryDelay = Google_Protobuf_Duration(seconds: 7, nanos: 500_000_000)
            var info = Google_Rpc_ErrorInfo()
            info.reason = "RATE_LIMIT_EXCEEDED"
            info.domain = "googleapis.com"
            status.details = [try Google_Protobuf_Any(message: retry), try Google_Protobuf_Any(message: info)]
        }
        // gRPC servers send the details unpadded.
        let unpadded = String(details.prefix { $0 != "=" })
        let answer = GRPCAnswer(response(.init(status: "8", message: "Quota exceeded: 100%25 used %E2%9C%93", detailsBase64: unpadded)))
        #expect(answer.code == .resourceExhausted)
        #expect(answer.message == "Quota exceeded: 100% used ✓ (RATE_LIMIT_EXCEEDED)")
        #expect(answer.retryDelaySeconds == 7.5)
    }

    @Test func aTwoHundredWithoutGRPCStatusIsInternalAndOtherStatusesAreMappedAsGRPCClientsMapThem() {
        #expect(GRPCAnswer(response(nil)).code == .internal)
        #expect(GRPCAnswer(response(status: 503, nil)).code == .unavailable)
        #expect(GRPCAnswer(response(status: 429, nil)).code == .unavailable)
        #expect(GRPCAnswer(response(status: 401, nil)).code == .unauthenticated)
        #expect(GRPCAnswer(response(status: 404, nil)).code == .unimplemented)
        #expect(GRPCAnswer(response(status: 400, nil)).code == .internal)
        #expect(GRPCAnswer(response(.init(status: "99"))).code == .unknown)
        #expect(GRPCAnswer(response(.init(status: "0"))).code == .ok)
    }

    /// Each code takes the path of the REST status Google's APIs give it.
    @Test func codesTakeThePathOfTheirHTTPStatus() {
        let outcomes = Dictionary(uniqueKeysWithValues: GRPCCode.allCases.map {
            ($0, FleetEngineOutcome.classify(status: $0.httpStatus))
        })
        #expect(outcomes[.ok] == .accepted)
        #expect(outcomes[.unavailable] == .transient(cause: .status(503), retryAfterSeconds: nil))
        #expect(outcomes[.deadlineExceeded] == .transient(cause: .status(504), retryAfterSeconds: nil))
        #expect(outcomes[.resourceExhausted] == .transient(cause: .throttled, retryAfterSeconds: nil))
        #expect(outcomes[.notFound] == .rejected(.vehicleNotFound))
        #expect(outcomes[.invalidArgument] == .rejected(.invalid))
        #expect(outcomes[.failedPrecondition] == .rejected(.invalid))
        #expect(outcomes[.permissionDenied] == .permissionDenied)
        #expect(outcomes[.unauthenticated] == .unauthenticated)
        for code in GRPCCode.allCases where code != .unknown {
            #expect(GRPCCode(httpStatus: code.httpStatus).httpStatus == code.httpStatus, "\(code.name)")
        }
    }

    @Test func anUpdateIsOneLengthPrefixedMessageOnItsMethodsPath() throws {
        let fix = LocationFix(latitude: 1.5, longitude: -2.25, recordedAtMilliseconds: 1_795_381_200_123, heading: 90,
                              speedMetersPerSecond: 12.5, accuracyMeters: 4, altitudeMeters: 30, sensor: .gps)
        let older = LocationFix(latitude: 1, longitude: 2, recordedAtMilliseconds: -1_500)
        let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: .deliveryVehicle, id: "dv/1"), lastLocation: fix,
                                           pastLocations: [older])
        let request = GRPCRequest(update: update, provider: "my project", mode: .device)
        #expect(request.path == "/maps.fleetengine.delivery.v1.DeliveryService/UpdateDeliveryVehicle")
        #expect(GRPCRequest.headers(timeout: .seconds(10), provider: "my project").map { "\($0.name): \($0.value)" }
                == ["te: trailers", "grpc-timeout: 10000m", "x-goog-request-params: provider_id=providers%2Fmy%20project"])
        var framed = request.framedMessage
        #expect(framed.readInteger(as: UInt8.self) == 0, "not compressed")
        #expect(framed.readInteger(as: UInt32.self).map(Int.init) == framed.readableBytes)
        let message = try Maps_Fleetengine_Delivery_V1_UpdateDeliveryVehicleRequest(serializedBytes: Array(framed.readableBytesView))
        #expect(message.deliveryVehicle.name == "providers/my project/deliveryVehicles/dv/1")
        #expect(message.updateMask.paths == ["last_location", "past_locations"])
        let last = message.deliveryVehicle.lastLocation
        #expect(last.location.latitude == 1.5 && last.location.longitude == -2.25)
        #expect(last.updateTime.seconds == 1_795_381_200 && last.updateTime.nanos == 123_000_000)
        #expect(last.locationSensor == .gps)
        #expect(last.latlngAccuracy.value == 4 && last.heading.value == 90 && last.speed.value == 12.5 && last.altitude.value == 30)
        #expect(!last.hasSupplementalLocation)
        // Before 1970: seconds round down, nanos stay positive, as Timestamp requires.
        let past = try #require(message.deliveryVehicle.pastLocations.first)
        #expect(past.updateTime.seconds == -2 && past.updateTime.nanos == 500_000_000)
        #expect(!past.hasHeading && !past.hasLatlngAccuracy, "absent fields stay absent")
    }

    /// The relay writes an update's protobuf by hand; swift-protobuf, given the messages the
    /// update stands for, must write the very same bytes, whatever the fix holds.
    @Test func updatesAreTheBytesSwiftProtobufWritesForTheirMessages() throws {
        var generator = SystemRandomNumberGenerator()
        func maybe<T>(_ value: @autoclosure () -> T) -> T? { Bool.random(using: &generator) ? value() : nil }
        func coordinate(_ range: ClosedRange<Double>) -> Double {
            [0, -0.0, range.lowerBound, range.upperBound, Double.random(in: range, using: &generator)].randomElement(using: &generator)!
        }
        func randomFix() -> LocationFix {
            let time = [0, -1, -1_500, 999, 1_795_381_200_123, Int64.random(in: -10_000_000_000_000...10_000_000_000_000, using: &generator)]
                .randomElement(using: &generator)!
            return LocationFix(latitude: coordinate(-90...90), longitude: coordinate(-180...180), recordedAtMilliseconds: time,
                               heading: maybe([0, 90, 359, -1, Int.max].randomElement(using: &generator)!),
                               speedMetersPerSecond: maybe(coordinate(0...100)), accuracyMeters: maybe(coordinate(0...50)),
                               altitudeMeters: maybe(coordinate(-100...9000)), sensor: maybe(LocationSensor.allCases.randomElement(using: &generator)!))
        }
        for _ in 0..<2_000 {
            let kind = VehicleKind.allCases.randomElement(using: &generator)!
            let mode = LocationMode.allCases.randomElement(using: &generator)!
            let update = VehicleLocationUpdate(vehicle: VehicleIdentity(kind: kind, id: "v\(Int.random(in: 0...999_999, using: &generator))"),
                                               lastLocation: randomFix(), pastLocations: (0..<Int.random(in: 0...4, using: &generator)).map { _ in randomFix() })
            var framed = GRPCRequest(update: update, provider: "p-1", mode: mode).framedMessage
            #expect(framed.readInteger(as: UInt8.self) == 0)
            #expect(framed.readInteger(as: UInt32.self).map(Int.init) == framed.readableBytes)
            let expected = try ReferenceMessages.update(update, name: GRPCRequest.vehicleName(provider: "p-1", vehicle: update.vehicle), mode: mode)
            guard Array(framed.readableBytesView) == expected else {
                Issue.record("\(kind) \(mode) \(update.lastLocation) and \(update.pastLocations.count) past: not what swift-protobuf writes")
                return
            }
        }
    }

    @Test func theTimeoutIsTheRequestTimeoutInGRPCsUnits() {
        #expect(GRPCRequest.timeoutText(.seconds(15)) == "15000m")
        #expect(GRPCRequest.timeoutText(.seconds(200_000)) == "200000S")
    }
}

/// The messages an update stands for, built with swift-protobuf: the reference the relay's own
/// encoding is held to. Sensors are named by their cases, not numbers.
private enum ReferenceMessages {
    static func update(_ update: VehicleLocationUpdate, name: String, mode: LocationMode) throws -> [UInt8] {
        var mask = Google_Protobuf_FieldMask()
        mask.paths = update.pastLocations.isEmpty ? ["last_location"] : ["last_location", "past_locations"]
        switch update.vehicle.kind {
        case .vehicle:
            var request = Maps_Fleetengine_V1_UpdateVehicleRequest()
            request.name = name
            request.vehicle.lastLocation = location(update.lastLocation, mode: mode, sensor: vehicleSensor)
            request.vehicle.pastLocations = update.pastLocations.map { location($0, mode: mode, sensor: vehicleSensor) }
            request.updateMask = mask
            return try request.serializedBytes()
        case .deliveryVehicle:
            var request = Maps_Fleetengine_Delivery_V1_UpdateDeliveryVehicleRequest()
            request.deliveryVehicle.name = name
            request.deliveryVehicle.lastLocation = location(update.lastLocation, mode: mode, sensor: deliverySensor)
            request.deliveryVehicle.pastLocations = update.pastLocations.map { location($0, mode: mode, sensor: deliverySensor) }
            request.updateMask = mask
            return try request.serializedBytes()
        }
    }

    private static func vehicleSensor(_ sensor: LocationSensor) -> Maps_Fleetengine_V1_LocationSensor {
        switch sensor {
        case .gps: .gps
        case .network: .network
        case .passive: .passive
        case .roadSnapped: .roadSnappedLocationProvider
        case .customerSupplied: .customerSuppliedLocation
        case .fused: .fusedLocationProvider
        }
    }

    /// The delivery API's sensor enum numbers its cases as the vehicle API's does.
    private static func deliverySensor(_ sensor: LocationSensor) -> Maps_Fleetengine_Delivery_V1_DeliveryVehicleLocationSensor {
        Maps_Fleetengine_Delivery_V1_DeliveryVehicleLocationSensor(rawValue: vehicleSensor(sensor).rawValue) ?? .unknownSensor
    }

    private static func location<Location: GRPCVehicleLocation>(
        _ fix: LocationFix, mode: LocationMode, sensor: (LocationSensor) -> Location.Sensor
    ) -> Location {
        var location = Location()
        let (seconds, remainder) = fix.recordedAtMilliseconds.quotientAndRemainder(dividingBy: 1000)
        let borrow: Int64 = remainder < 0 ? 1 : 0
        let time = Google_Protobuf_Timestamp(seconds: seconds - borrow, nanos: Int32((remainder + borrow * 1000) * 1_000_000))
        var point = Google_Type_LatLng()
        point.latitude = fix.latitude
        point.longitude = fix.longitude
        switch mode {
        case .supplemental:
            location.supplementalLocation = point
            location.supplementalLocationTime = time
            location.supplementalLocationSensor = sensor(fix.sensor ?? .customerSupplied)
            if let accuracy = fix.accuracyMeters { location.supplementalLocationAccuracy = Google_Protobuf_DoubleValue(accuracy) }
        case .device:
            location.location = point
            location.updateTime = time
            if let value = fix.sensor { location.locationSensor = sensor(value) }
            if let accuracy = fix.accuracyMeters { location.latlngAccuracy = Google_Protobuf_DoubleValue(accuracy) }
        }
        if let heading = fix.heading { location.heading = Google_Protobuf_Int32Value(Int32(clamping: heading)) }
        if let speed = fix.speedMetersPerSecond { location.speed = Google_Protobuf_DoubleValue(speed) }
        if let altitude = fix.altitudeMeters { location.altitude = Google_Protobuf_DoubleValue(altitude) }
        return location
    }
}
