import FleetEngine
import JSON

/// Validates an update body as Fleet Engine would (400 on failure) and extracts
/// the time of its `lastLocation`.
enum UpdateBodyValidator {
    static let forbiddenFields = ["serverTime", "horizontalAccuracy", "speedKmph", "roadSnapped"]

    struct Invalid: Error { let message: String }

    struct ValidUpdate {
        let lastLocation: JSONValue
        let locationTimeMilliseconds: Int64
        /// Times of the `pastLocations`, in the order sent.
        let pastLocationTimes: [Int64]
    }

    static func validate(body: [UInt8], updateMask: String?) throws(Invalid) -> ValidUpdate {
        let mask = Set((updateMask ?? "").split(separator: ",").map { $0.trimmingSpaces() })
        guard mask.contains("last_location") || mask.contains("lastLocation") else {
            throw Invalid(message: "updateMask must name last_location.")
        }
        guard let document = try? JSONParser.parse(body), case .object = document else {
            throw Invalid(message: "Body is not a JSON object.")
        }
        guard let lastLocation = document["lastLocation"], case .object = lastLocation else {
            throw Invalid(message: "lastLocation is required.")
        }
        let time = try location(lastLocation, field: "lastLocation")
        var pastTimes: [Int64] = []
        if let past = document["pastLocations"] {
            guard mask.contains("past_locations") || mask.contains("pastLocations") else {
                throw Invalid(message: "pastLocations is outside updateMask and would be ignored.")
            }
            guard let elements = past.arrayValue else { throw Invalid(message: "pastLocations must be an array.") }
            for (index, element) in elements.enumerated() {
                pastTimes.append(try location(element, field: "pastLocations[\(index)]"))
            }
        }
        return ValidUpdate(lastLocation: lastLocation, locationTimeMilliseconds: time, pastLocationTimes: pastTimes)
    }

    /// Checks one `VehicleLocation` and returns its time.
    private static func location(_ value: JSONValue, field: String) throws(Invalid) -> Int64 {
        guard let members = value.objectValue else { throw Invalid(message: "\(field) must be an object.") }
        for forbidden in forbiddenFields where members[forbidden] != nil {
            throw Invalid(message: "\(field).\(forbidden) is output-only or deprecated.")
        }
        let (pointField, timeField) = members["supplementalLocation"] != nil
            ? ("supplementalLocation", "supplementalLocationTime") : ("location", "updateTime")
        guard let point = members[pointField], let latitude = point["latitude"]?.numberValue,
            let longitude = point["longitude"]?.numberValue, (-90...90).contains(latitude), (-180...180).contains(longitude)
        else { throw Invalid(message: "\(field).\(pointField) must be a valid LatLng.") }
        guard let timeText = members[timeField]?.stringValue, let time = RFC3339.parseMilliseconds(timeText) else {
            throw Invalid(message: "\(field).\(timeField) must be an RFC 3339 timestamp.")
        }
        if let heading = members["heading"] {
            guard let degrees = heading.numberValue, degrees == degrees.rounded(), (0...359).contains(degrees) else {
                throw Invalid(message: "\(field).heading must be an integer from 0 to 359.")
            }
        }
        for numeric in ["speed", "altitude", "supplementalLocationAccuracy", "latlngAccuracy"] {
            if let number = members[numeric], number.numberValue == nil {
                throw Invalid(message: "\(field).\(numeric) must be a number.")
            }
        }
        return time
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        String(self.drop { $0 == " " })
    }
}
