"""A gRPC server built on Google's own message types (google-maps-fleetengine, -delivery) and
grpcio, recording what a client sends: per call one JSON line on stdout with the method, the
metadata, the deadline left and the message in protobuf's JSON mapping (REST's field names).
Prints "port N" once listening; stops when stdin closes.

Usage: grpc_peer.py CERT_FILE KEY_FILE

Answers: a vehicle whose id ends in "-missing" is NOT_FOUND; one ending in "-throttled" is
RESOURCE_EXHAUSTED with RetryInfo of 7 s (both trailers-only answers, as grpcio sends errors);
any other is OK, an update with the vehicle it sent, a read with a location recorded at
1795381200000 ms.
"""
import json
import sys
from concurrent import futures

import grpc
from google.maps import fleetengine_delivery_v1 as fd
from google.maps import fleetengine_v1 as fe
from google.protobuf import any_pb2, json_format, timestamp_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

METHODS = {
    "/maps.fleetengine.v1.VehicleService/UpdateVehicle": (fe.UpdateVehicleRequest, fe.Vehicle),
    "/maps.fleetengine.v1.VehicleService/GetVehicle": (fe.GetVehicleRequest, fe.Vehicle),
    "/maps.fleetengine.delivery.v1.DeliveryService/UpdateDeliveryVehicle": (fd.UpdateDeliveryVehicleRequest, fd.DeliveryVehicle),
    "/maps.fleetengine.delivery.v1.DeliveryService/GetDeliveryVehicle": (fd.GetDeliveryVehicleRequest, fd.DeliveryVehicle),
}


def vehicle_of(request):
    """The vehicle an update carries, or None for a read."""
    for field in ("vehicle", "delivery_vehicle"):
        if request.DESCRIPTOR.fields_by_name.get(field) is not None:
            return getattr(request, field)
    return None


def name_of(request):
    vehicle = vehicle_of(request)
    return request.name if vehicle is None or request.DESCRIPTOR.fields_by_name.get("name") is not None else vehicle.name


def handler(method, request_type, response_type):
    def unary(request, context):
        print(json.dumps({
            "method": method,
            "metadata": {key: value for key, value in context.invocation_metadata()},
            "time_remaining": context.time_remaining(),
            "message": json_format.MessageToDict(request),
        }), flush=True)
        name = name_of(request)
        if name.endswith("-missing"):
            context.abort_with_status(rpc_status.to_status(status_pb2.Status(
                code=code_pb2.NOT_FOUND, message=f"Vehicle {name} does not exist.")))
        if name.endswith("-throttled"):
            retry = any_pb2.Any()
            retry.Pack(error_details_pb2.RetryInfo(retry_delay={"seconds": 7}))
            context.abort_with_status(rpc_status.to_status(status_pb2.Status(
                code=code_pb2.RESOURCE_EXHAUSTED, message="Quota exceeded 100%", details=[retry])))
        vehicle = vehicle_of(request)
        if vehicle is not None:
            answer = response_type.pb()()
            answer.CopyFrom(vehicle)
            answer.name = name
            return answer
        answer = response_type.pb()(name=name)
        stamp = timestamp_pb2.Timestamp()
        stamp.FromMilliseconds(1795381200000)
        answer.last_location.supplemental_location_time.CopyFrom(stamp)
        return answer

    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=request_type.pb().FromString, response_serializer=lambda message: message.SerializeToString())


class Handlers(grpc.GenericRpcHandler):
    def service(self, call_details):
        types = METHODS.get(call_details.method)
        return handler(call_details.method, *types) if types else None


cert_file, key_file = sys.argv[1:3]
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers([Handlers()])
credentials = grpc.ssl_server_credentials([(open(key_file, "rb").read(), open(cert_file, "rb").read())])
port = server.add_secure_port("127.0.0.1:0", credentials)
server.start()
print(f"port {port}", flush=True)
sys.stdin.read()
server.stop(0)
