import FleetEngineProtos
import FleetModel
import SwiftProtobuf

/// `VehicleLocation` and `DeliveryVehicleLocation`: the same fields under the same numbers in
/// two packages, so one function reads either.
package protocol GRPCVehicleLocation: SwiftProtobuf.Message {
    associatedtype Sensor: SwiftProtobuf.Enum where Sensor.RawValue == Int
    var location: Google_Type_LatLng { get set }
    var updateTime: Google_Protobuf_Timestamp { get set }
    var hasUpdateTime: Bool { get }
    var locationSensor: Sensor { get set }
    var latlngAccuracy: Google_Protobuf_DoubleValue { get set }
    var supplementalLocation: Google_Type_LatLng { get set }
    var supplementalLocationTime: Google_Protobuf_Timestamp { get set }
    var hasSupplementalLocationTime: Bool { get }
    var supplementalLocationSensor: Sensor { get set }
    var supplementalLocationAccuracy: Google_Protobuf_DoubleValue { get set }
    var heading: Google_Protobuf_Int32Value { get set }
    var speed: Google_Protobuf_DoubleValue { get set }
    var altitude: Google_Protobuf_DoubleValue { get set }
}

extension Maps_Fleetengine_V1_VehicleLocation: GRPCVehicleLocation {}
extension Maps_Fleetengine_Delivery_V1_DeliveryVehicleLocation: GRPCVehicleLocation {}

/// `Vehicle` and `DeliveryVehicle`, as far as the relay and the emulator use them.
package protocol GRPCVehicleMessage: SwiftProtobuf.Message {
    associatedtype Location: GRPCVehicleLocation
    var name: String { get set }
    var lastLocation: Location { get set }
    var hasLastLocation: Bool { get }
    var pastLocations: [Location] { get set }
}

extension Maps_Fleetengine_V1_Vehicle: GRPCVehicleMessage {}
extension Maps_Fleetengine_Delivery_V1_DeliveryVehicle: GRPCVehicleMessage {}

extension GRPCVehicleMessage {
    /// The newest time of its live location; nil when it has none.
    package var locationMilliseconds: Int64? { hasLastLocation ? lastLocation.newestTimeMilliseconds : nil }
}

extension GRPCVehicleLocation {
    /// The newest of `supplemental_location_time` and `update_time`, as `LiveLocation` reads REST's.
    var newestTimeMilliseconds: Int64? {
        [hasSupplementalLocationTime ? supplementalLocationTime : nil, hasUpdateTime ? updateTime : nil]
            .compactMap { $0?.milliseconds }.max()
    }
}

extension LocationSensor {
    /// The sensor's number in Fleet Engine's `LocationSensor` and `DeliveryVehicleLocationSensor`.
    var fleetEngineNumber: Int {
        switch self {
        case .gps: 1
        case .network: 2
        case .passive: 3
        case .roadSnapped: 4
        case .customerSupplied: 5
        case .fused: 100
        }
    }
}

extension Google_Protobuf_Timestamp {
    var milliseconds: Int64 { seconds * 1000 + Int64(nanos / 1_000_000) }
}
